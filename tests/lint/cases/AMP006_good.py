import torch
from torch.amp import GradScaler as Scaler, autocast

scaler = Scaler("cuda")
legacy = torch.amp.GradScaler("cuda", init_scale=1024)

for x, y in loader:
    with autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    with torch.autocast("cpu"):
        pass
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
