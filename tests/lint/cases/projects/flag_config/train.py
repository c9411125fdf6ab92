"""The scaler is built when config.py turns mixed precision on, which it does exactly for
bfloat16: it then scales a bfloat16 loss (AMP008, when `dtype` is 'bfloat16')."""

import torch
from config import dtype, mixed_precision

scaler = torch.amp.GradScaler("cuda") if mixed_precision else None
ptdtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    with torch.autocast("cuda", dtype=ptdtype, enabled=mixed_precision):
        loss = model(x, y)
    if scaler is not None:
        scaler.scale(loss).backward()  # expect: AMP008
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    optimizer.zero_grad()
