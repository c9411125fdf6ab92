import torch

scaler = torch.amp.GradScaler("cuda")

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    optimizer.step()  # expect: AMP004
    scaler.update()
    optimizer.zero_grad()
