"""A name rebound later in the same scope is judged by the binding that reaches each use:
the first scaler serves an fp16 section, the second one scales a bfloat16 loss."""

import torch

optimizer = torch.optim.AdamW(model.parameters())

scaler = torch.cuda.amp.GradScaler()  # expect: AMP006
for x, y in warmup_loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()

scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, y)
    scaler.scale(loss).backward()  # expect: AMP008
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
