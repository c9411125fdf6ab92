# The same loop on a mean-reduced loss from another module: it must be divided.
import torch
from mean_loss import mean_loss

optimizer = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler("cuda")
for step, (x, y) in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = mean_loss(model(x), y)
    scaler.scale(loss).backward()  # expect: AMP011
    if (step + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
