# The loss is a sum over frames: its value is recorded beside the frame count and reported
# divided by it, so accumulating micro-batches needs no division by their number.
import torch


def batch_loss(model, batch):
    loss = model(batch["x"], batch["lens"])
    stats = {}
    stats["frames"] = batch["lens"].sum().item()
    stats["loss"] = loss.detach().cpu().item()
    return loss, stats


def train(model, loader, optimizer, scaler, accum):
    totals = {"loss": 0.0, "frames": 0}
    for step, batch in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss, stats = batch_loss(model, batch)
        scaler.scale(loss).backward()
        if (step + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        totals["loss"] += stats["loss"]
        totals["frames"] += stats["frames"]
    return totals["loss"] / totals["frames"]
