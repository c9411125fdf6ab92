"""The autocast dtype is the --dtype option of config.py, whose choices are float32 and
bfloat16: it is never float16, so training without a scaler is fine."""

import torch
from config import args

optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    with torch.autocast("cuda", dtype=getattr(torch, args.dtype)):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
