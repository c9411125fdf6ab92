"""The same flag, but this script's scaler is enabled for float16 only: never with bfloat16."""

import config
import torch

scaler = torch.amp.GradScaler("cuda", enabled=config.dtype == "float16")
ptdtype = torch.bfloat16 if config.dtype == "bfloat16" else torch.float16
optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    with torch.autocast("cuda", dtype=ptdtype, enabled=config.mixed_precision):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
