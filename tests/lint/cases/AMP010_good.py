import torch

scaler = torch.amp.GradScaler("cuda")

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss_a = loss_fn(model_a(x), y)
        loss_b = loss_fn(model_b(x), y)
    scaler.scale(loss_a + loss_b).backward()
    scaler.unscale_(optimizer_a)
    scaler.unscale_(optimizer_b)
    torch.nn.utils.clip_grad_norm_(model_a.parameters(), 1.0)
    torch.nn.utils.clip_grad_norm_(model_b.parameters(), 1.0)
    scaler.step(optimizer_a)
    scaler.step(optimizer_b)
    scaler.update()
    optimizer_a.zero_grad()
    optimizer_b.zero_grad()
