import torch

scaler = torch.amp.GradScaler("cuda")
accum_steps = 4

for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
        loss = loss / accum_steps
    scaler.scale(loss).backward()
    if (i + 1) % accum_steps == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


for step, batch in enumerate(loader):
    out = model(batch)
    (out.loss / args.gradient_accumulation_steps).backward()
    if step % args.gradient_accumulation_steps != 0:
        continue
    optimizer.step()
    optimizer.zero_grad()

for step, batch in enumerate(loader):
    loss = model(batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 100 == 0:
        print(step, loss.item())
