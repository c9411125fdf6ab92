# The accumulation guard is a flag bound to the remainder test; a flag computed from the
# count (a comparison) handed to the loss function does not normalise the loss.
import torch


def train(model, loader, optimizer, accum: int, log_every: int):
    updates = 0
    for i, batch in enumerate(loader):
        is_step: bool = (i + 1) % accum == 0
        is_log = i == 0 or (is_step and updates % log_every == 0)
        loss = compute_loss(model(batch), log=is_log)
        loss.backward()  # expect: AMP011
        if is_step:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            updates += 1


def train_divided(model, loader, optimizer, accum: int):
    for i, batch in enumerate(loader):
        is_step = (i + 1) % accum == 0
        part = compute_loss(model(batch)) / accum
        part.backward()
        if is_step:
            optimizer.step()
            optimizer.zero_grad()
