"""One local name, ``scaler``, bound to a disabled GradScaler in the evaluation-style
function and to a real one in the training function: each function is judged by its own
binding. The disabled one's ``scale`` returns the loss, so a direct step there bypasses
nothing; the real one's direct step skips the inf check."""

import torch


def finetune_full_precision(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    for x, y in loader:
        loss = model(x, y)
        scaler.scale(loss).backward()
        optimizer.step()
        optimizer.zero_grad()


def train_fp16(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        optimizer.step()  # expect: AMP004
        optimizer.zero_grad()
