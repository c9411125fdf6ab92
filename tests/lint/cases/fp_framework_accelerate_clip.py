"""Accelerate's own clip unscales first; an Accelerator configured outside the code (no
mixed_precision= here) may not scale at all; unscale_gradients() before a torch clip
unscales; an FSDP module's clip after scaler.unscale_ is right."""

import torch
from accelerate import Accelerator


def main(model, loader, optimizer):
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        accelerator.unscale_gradients()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()


def configured_outside(model, loader, optimizer):
    accelerator = Accelerator()
    for batch in loader:
        accelerator.backward(model(**batch).loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()


def fsdp_step(model, batch, optimizer, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    model.clip_grad_norm_(1.0)
    scaler.step(optimizer)
    scaler.update()
