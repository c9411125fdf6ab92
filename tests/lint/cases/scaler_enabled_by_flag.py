"""A scaler and an autocast switched by the same flag: when fp16 is on, the scaler is on."""
import torch

use_fp16 = args.precision == "fp16"
scaler = torch.amp.GradScaler("cuda", enabled=use_fp16)
optimizer = torch.optim.AdamW(model.parameters())

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16, enabled=use_fp16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
