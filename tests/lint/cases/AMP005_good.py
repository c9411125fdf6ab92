import torch

scaler = torch.amp.GradScaler("cuda")


def optimizer_step():
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()


for epoch in range(10):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        optimizer_step()
