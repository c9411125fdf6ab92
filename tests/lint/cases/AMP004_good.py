import torch

scaler = torch.amp.GradScaler("cuda")
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 10)

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad()
