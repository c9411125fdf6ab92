"""The same loops with the loss divided by the number of micro-batches; a loop over the
tasks of a multi-task loss (each term is part of the objective, not a micro-batch) and
Accelerate's backward (it divides by its own accumulation count) are not accumulation
mistakes."""

import torch


class Trainer:
    def run_fwdbwd(self, loader, total, n_micro):
        seen = 0
        while True:
            batch = next(loader)
            loss = self.model(batch) / n_micro
            loss.backward()
            seen += len(batch)
            if seen >= total:
                break

    def train_one_step(self, loader, total, n_micro):
        self.run_fwdbwd(loader, total, n_micro)
        self.optimizer.step()
        self.optimizer.zero_grad()


def multi_task(model, batch, optimizer, tasks):
    for task in tasks:
        model(batch, task=task).backward()
    optimizer.step()


def with_accelerate(accelerator, model, loader, optimizer, accumulation):
    for i, batch in enumerate(loader):
        loss = model(batch)
        accelerator.backward(loss)
        if (i + 1) % accumulation == 0:
            optimizer.step()
            optimizer.zero_grad()


class Module:
    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self.compute(batch) / self.accumulate_grad_batches
        self.manual_backward(loss)
        if (batch_idx + 1) % self.accumulate_grad_batches == 0:
            opt.step()
            opt.zero_grad()
