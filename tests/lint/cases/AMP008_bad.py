import torch

scaler = torch.amp.GradScaler("cuda")

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()  # expect: AMP008
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
