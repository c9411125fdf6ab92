# The model's loss is summed over its tokens (the default reduction of its forward, two
# imports away): accumulating micro-batches of it needs no division.
import torch
from models import Net

model = Net()
optimizer = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler("cuda")
for step, (x, y) in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x, y)
    scaler.scale(loss).backward()
    if (step + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
