import torch
import torch.cuda.amp as amp  # expect: AMP006
from torch.cuda.amp import GradScaler as Scaler, autocast  # expect: AMP006

scaler = Scaler()  # expect: AMP006
legacy = torch.cuda.amp.GradScaler(init_scale=1024)  # expect: AMP006

for x, y in loader:
    with autocast(dtype=torch.float16):  # expect: AMP006
        loss = loss_fn(model(x), y)
    with amp.autocast():  # expect: AMP006
        pass
    with torch.cpu.amp.autocast():  # expect: AMP006
        pass
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
