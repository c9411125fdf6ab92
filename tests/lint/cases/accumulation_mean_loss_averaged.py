# A mean-reduced loss averaged over the steps when reported (a step counter, not an element
# count summed from a tensor), and a file whose losses are not all sum-reduced: the
# accumulated loss still needs dividing.
import torch
import torch.nn.functional as F


def batch_loss(logits, targets, sum_up: bool):
    if sum_up:
        return F.cross_entropy(logits, targets, reduction="sum")
    return F.cross_entropy(logits, targets)


def train(model, loader, optimizer, scaler, accum):
    totals = {"loss": 0.0, "steps": 0}
    for step, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = batch_loss(model(x), y, False)
        scaler.scale(loss).backward()  # expect: AMP011
        if (step + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        totals["loss"] += loss.item()
        totals["steps"] += 1
    return totals["loss"] / totals["steps"]
