"""The same split call with enabled=True is a scaler: the clip sees scaled gradients."""

import torch

scaler = torch.amp.GradScaler(
    "cuda",
    enabled=True,
)

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # expect: AMP001
    scaler.step(optimizer)
    scaler.update()
