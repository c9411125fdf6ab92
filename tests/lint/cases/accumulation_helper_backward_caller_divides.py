"""A helper computes the loss and runs its backward; the caller loops over micro-batches and
divides only the returned value (for the log), after the backward has used it."""

import torch


class Trainer:
    def _compute_loss_and_backward(self, batch, do_backward=True):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.model(batch).mean()
        if do_backward:
            loss.backward()  # expect: AMP011
        return loss

    def training_step(self, batch):
        self.optimizer.zero_grad()
        micro_batches = batch.split(4)
        n_micro_batches = len(micro_batches)
        step_loss = 0.0
        for micro_batch in micro_batches:
            loss = self._compute_loss_and_backward(batch=micro_batch) / n_micro_batches
            step_loss += loss.item()
        self.optimizer.step()
        return step_loss
