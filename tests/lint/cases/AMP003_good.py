import torch

scaler = torch.amp.GradScaler("cuda")
use_amp = True

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
        loss = loss_fn(model(x), y)
    if use_amp:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    if use_amp:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad()
