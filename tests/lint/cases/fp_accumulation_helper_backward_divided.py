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


class Losses:
    def __init__(self, loss_total):
        self.loss_total = loss_total

    def __truediv__(self, n):
        return Losses(self.loss_total / n)


def train_component(component, optimizer, loader, grad_acc_steps):
    """A loss object divided as a whole (``__truediv__``) and its field backpropagated, and
    the gradients divided after the micro-batch loop, before the step."""
    for batch in loader:
        optimizer.zero_grad()
        for _ in range(grad_acc_steps):
            losses = component.compute_loss(batch) / grad_acc_steps
            loss_total_step = losses.loss_total
            loss_total_step.backward()
        optimizer.step()


def train_grads_divided(model, loader, optim, num_microbatches):
    for batch in loader:
        optim.zero_grad()
        for _ in range(num_microbatches):
            mb_loss = model(batch).mean()
            mb_loss.backward()
        if num_microbatches > 1:
            for p in model.parameters():
                if p.requires_grad:
                    p.grad.div_(num_microbatches)
        optim.step()
