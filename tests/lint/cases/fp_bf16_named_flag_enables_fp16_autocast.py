"""A scaler built when a flag named for bfloat16 is true, in a helper with no autocast in
view; the same flag enables the file's autocast, and that autocast is float16: whatever
the flag's name says, the scaler serves float16, so nothing is reported."""

import torch


def init_opt(model, lr, use_bfloat16=False):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cuda") if use_bfloat16 else None
    return optimizer, scaler


def run_one_epoch(model, loader, optimizer, scaler, use_bfloat16):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16, enabled=use_bfloat16):
            loss = model(x, y)
        if use_bfloat16:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
