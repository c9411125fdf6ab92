"""Accelerate built for float16 in the code scales the loss in accelerator.backward; a torch
clip right after it clips scaled gradients (accelerator.clip_grad_norm_ unscales first). An
FSDP module's own clip_grad_norm_ after a scaled backward clips scaled gradients too."""

import torch
from accelerate import Accelerator


def main(model, loader, optimizer):
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # expect: AMP001
        optimizer.step()
        optimizer.zero_grad()


def fsdp_step(model, batch, optimizer, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch)
    scaler.scale(loss).backward()
    model.clip_grad_norm_(1.0)  # expect: AMP001
    scaler.step(optimizer)
    scaler.update()
