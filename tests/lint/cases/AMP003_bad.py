import torch

scaler = torch.amp.GradScaler("cuda")

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    loss.backward()  # expect: AMP003
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
