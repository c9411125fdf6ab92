"""The deprecated API reached through its submodules and module aliases is the same API."""
import torch
import torch.cuda.amp as amp  # expect: AMP006
from torch.cuda.amp.autocast_mode import autocast  # expect: AMP006
from torch.cuda.amp.grad_scaler import GradScaler as Scaler  # expect: AMP006

scaler = Scaler()  # expect: AMP006
backup = torch.cuda.amp.grad_scaler.GradScaler()  # expect: AMP006
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for x, y in loader:
    with autocast(enabled=False):  # expect: AMP006
        reference = model(x)
    with amp.autocast():  # expect: AMP006
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
