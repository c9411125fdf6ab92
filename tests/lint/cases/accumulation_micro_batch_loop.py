"""A step's gradients gathered by a loop over micro-batches (drawn with next(), or chunks of
one batch), one optimizer step after the loop, and the loss never divided by their number.
Written through a Fabric backward and a Lightning manual backward too: neither divides."""

import torch


class Trainer:
    def run_fwdbwd(self, loader, total):
        seen = 0
        while True:
            batch = next(loader)
            loss = self.model(batch)
            loss.backward()  # expect: AMP011
            seen += len(batch)
            if seen >= total:
                break

    def train_one_step(self, loader, total):
        self.run_fwdbwd(loader, total)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad()


def chunked(model, batch, optimizer, n):
    for micro in batch.chunk(n):
        model(micro).backward()  # expect: AMP011
    optimizer.step()


def with_fabric(fabric, model, loader, optimizer, accumulation):
    for i, batch in enumerate(loader):
        accumulating = i % accumulation != 0
        loss = model(batch)
        fabric.backward(loss)  # expect: AMP011
        if accumulating:
            continue
        optimizer.step()
        optimizer.zero_grad()


class Module:
    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self.compute(batch)
        self.manual_backward(loss)  # expect: AMP011
        if (batch_idx + 1) % self.accumulate_grad_batches == 0:
            opt.step()
            opt.zero_grad()
