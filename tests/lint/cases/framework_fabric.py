"""Fabric at 32-bit precision with fp16 autocast written by hand: fabric.backward does not
scale the loss, so the fp16 gradients underflow."""
import torch
from lightning.fabric import Fabric

fabric = Fabric(accelerator="cuda", precision="32-true")
model, optimizer = fabric.setup(build_model(), torch.optim.SGD(params, lr=0.1))

for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):  # expect: AMP002
        loss = torch.nn.functional.mse_loss(model(x), y)
    fabric.backward(loss)
    fabric.clip_gradients(model, optimizer, max_norm=1.0)
    optimizer.step()
