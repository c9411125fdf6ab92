"""A GradScaler built with enabled=False scales nothing: fp16 autocast with it trains
without loss scaling, as if there were no scaler."""
import torch

scaler = torch.amp.GradScaler("cuda", enabled=False)
optimizer = torch.optim.AdamW(model.parameters())

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):  # expect: AMP002
        loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
