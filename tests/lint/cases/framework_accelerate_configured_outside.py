"""Accelerator() without mixed_precision takes it from `accelerate config` / the launcher;
with "fp16" there, accelerator.backward scales the loss. Not provably unscaled: not reported.
A GradScaler-style clip by the accelerator unscales first, so it is never AMP001."""
import torch
from accelerate import Accelerator

accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(build_model(), make_optimizer(), loader)

for batch in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(**batch).loss
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
