"""Fabric(precision="16-mixed") scales the loss inside fabric.backward and unscales before
its clip_gradients: nothing is missing, nothing is clipped while scaled."""
import torch
from lightning.fabric import Fabric

fabric = Fabric(accelerator="cuda", precision="16-mixed")
model, optimizer = fabric.setup(build_model(), torch.optim.SGD(params, lr=0.1))

for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x), y)
    fabric.backward(loss)
    fabric.clip_gradients(model, optimizer, max_norm=1.0)
    optimizer.step()
