"""An engine's backward given the loss by keyword (``booster.backward(loss=..., optimizer=
...)``, as Colossal-AI's booster takes it): the loss is the argument, already divided by
the accumulation count, not the object the method is called on."""


def train(model, loader, booster, optimizer, accumulation_steps):
    for step, batch in enumerate(loader):
        loss = model(batch).mean()
        booster.backward(loss=(loss / accumulation_steps), optimizer=optimizer)
        if (step + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
