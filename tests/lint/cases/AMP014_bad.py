import torch

scaler = torch.amp.GradScaler("cuda")

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    optimizer.zero_grad()  # expect: AMP014
    scaler.step(optimizer)
    scaler.update()


def step(loss):
    scaler.scale(loss).backward()
    if not torch.isfinite(loss):
        optimizer.zero_grad()  # expect: AMP014
    scaler.step(optimizer)
    scaler.update()


def train_prepared(accelerator, model, optimizer, loader):
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        with accelerator.autocast():
            loss = model(batch)
        accelerator.backward(loss)
        optimizer.zero_grad()  # expect: AMP014
        optimizer.step()
