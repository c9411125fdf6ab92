"""The fix: the loss is divided before the backward; the value logged after it is the same
divided loss."""

import torch


def train(args, model, optimizer, loader, scaler):
    for step, batch in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(**batch).loss
        loss = loss / args.gradient_accumulation_steps
        scaler.scale(loss).backward()
        print(f"loss {loss.item():.4f}")
        if (step + 1) % args.gradient_accumulation_steps == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
