import torch
from torch.cuda.amp import GradScaler as Scaler, autocast  # keep this comment

scaler = Scaler(init_scale=2.0**14,   growth_interval=100)  # odd spacing is kept
for x, y in loader:
    with autocast(True, torch.float16):
        loss = model(x)
    with autocast():
        pass
    with autocast(
        dtype=torch.float16,  # a comment inside the call
    ):
        pass
    scaler.scale(loss).backward()
