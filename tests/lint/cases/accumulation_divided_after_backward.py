"""The loss is divided by the accumulation count only after the backward that used it (the
division feeds the log): the gradients still add up N undivided losses (AMP011)."""

import torch


def train(args, model, optimizer, loader, scaler):
    for step, batch in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(**batch).loss
        scaler.scale(loss).backward()  # expect: AMP011
        loss = loss / args.gradient_accumulation_steps
        print(f"loss {loss.item():.4f}")
        if (step + 1) % args.gradient_accumulation_steps == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
