import torch

scaler = torch.amp.GradScaler("cuda")

for x, y in loader:
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    try:
        scaler.scale(loss).backward()
    except torch.cuda.OutOfMemoryError:
        optimizer.zero_grad()
        torch.cuda.empty_cache()
        continue
    if not torch.isfinite(loss):
        optimizer.zero_grad()
        continue
    scaler.step(optimizer)
    scaler.update()


def train_prepared(accelerator, model, optimizer, loader):
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        with accelerator.autocast():
            loss = model(batch)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
