"""A GradScaler built with a literal enabled=False (the call split over lines) scales nothing:
clipping after its backward clips real gradients."""

import torch

scaler = torch.amp.GradScaler(
    "cuda",
    enabled=False,
)

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
