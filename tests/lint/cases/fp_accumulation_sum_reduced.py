# Gradient accumulation of a loss summed over its elements: n summed micro-batch losses
# have the gradients of one summed big batch, so nothing is divided by n.
import torch
import torch.nn.functional as F


def token_loss(logits, targets, reduction: str = "sum"):
    return F.cross_entropy(logits, targets, reduction=reduction)


scaler = torch.amp.GradScaler("cuda")

for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = token_loss(model(x), y)
    scaler.scale(loss).backward()
    if (i + 1) % accum_steps == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
