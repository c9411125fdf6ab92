"""The helper divides by the micro-batch count it is given before its backward, and a
helper that backwards the loss it receives gets it divided by the caller: nothing to
report."""

import torch


class Trainer:
    def _compute_loss_and_backward(self, batch, n_micro_batches=1):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.model(batch).mean()
        loss = loss / n_micro_batches
        loss.backward()
        return loss

    def _backward(self, loss):
        loss.backward()

    def training_step(self, batch):
        self.optimizer.zero_grad()
        micro_batches = batch.split(4)
        n_micro_batches = len(micro_batches)
        for micro_batch in micro_batches:
            self._compute_loss_and_backward(micro_batch, n_micro_batches=n_micro_batches)
        self.optimizer.step()

    def other_step(self, batch):
        self.optimizer.zero_grad()
        micro_batches = batch.chunk(4)
        for micro_batch in micro_batches:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = self.model(micro_batch).mean()
            self._backward(loss / len(micro_batches))
        self.optimizer.step()
