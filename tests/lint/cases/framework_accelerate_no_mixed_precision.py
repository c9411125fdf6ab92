"""Accelerate told mixed_precision="no" while the loop autocasts to fp16 by hand:
accelerator.backward then has no scaler to apply."""
import torch
from accelerate import Accelerator

accelerator = Accelerator(mixed_precision="no")
model, optimizer, loader = accelerator.prepare(build_model(), make_optimizer(), loader)

for batch in loader:
    with torch.autocast("cuda", dtype=torch.float16):  # expect: AMP002
        loss = model(**batch).loss
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
