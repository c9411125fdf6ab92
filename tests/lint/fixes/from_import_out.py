import torch
from torch.amp import GradScaler as Scaler, autocast  # keep this comment

scaler = Scaler("cuda", init_scale=2.0**14,   growth_interval=100)  # odd spacing is kept
for x, y in loader:
    with autocast("cuda", enabled=True, dtype=torch.float16):
        loss = model(x)
    with autocast("cuda"):
        pass
    with autocast(
        "cuda", dtype=torch.float16,  # a comment inside the call
    ):
        pass
    scaler.scale(loss).backward()
