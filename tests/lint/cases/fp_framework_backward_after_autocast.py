"""The framework's autocast around the forward only, its backward after the block."""

from accelerate import Accelerator


def train(model, loader, optimizer):
    accelerator = Accelerator(mixed_precision="bf16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x in loader:
        with accelerator.autocast():
            loss = model(x)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
