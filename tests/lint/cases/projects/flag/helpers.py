import torch


def train_step(model, batch, optimizer, use_amp=False):
    with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):  # expect: AMP002
        loss = model(batch).sum()
    loss.backward()
    optimizer.step()
