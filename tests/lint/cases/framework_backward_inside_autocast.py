"""A framework's backward inside an autocast block: Accelerate's ``accelerator.backward``
inside ``accelerator.autocast()``, Fabric's ``fabric.backward`` inside ``torch.autocast``.
The backward runs under autocast all the same."""

import torch
from accelerate import Accelerator


def train(model, loader, optimizer):
    accelerator = Accelerator(mixed_precision="bf16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x in loader:
        with accelerator.autocast():
            loss = model(x)
            accelerator.backward(loss)  # expect: AMP012
        optimizer.step()
        optimizer.zero_grad()


def train_fabric(fabric, model, loader, optimizer):
    for x in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
            fabric.backward(loss)  # expect: AMP012
        optimizer.step()
        optimizer.zero_grad()
