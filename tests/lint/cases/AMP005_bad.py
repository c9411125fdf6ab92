import torch

scaler = torch.amp.GradScaler("cuda")

for epoch in range(10):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # expect: AMP005
        optimizer.zero_grad()
    scaler.update()
