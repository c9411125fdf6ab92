"""A callback drives the step through an engine object it does not build: the engine's
``backward_loss`` scales the loss, and the callback clips before the engine's
``optimizer_step`` runs ``scaler.step`` (AMP001). Only one class of the file defines those
methods, so the calls are followed into it."""

import torch


class AmpEngine:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def backward_loss(self, loss):
        self.scaler.scale(loss).backward()

    def optimizer_step(self, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()


class OptimizerCallback:
    def __init__(self, model, optimizer, max_norm):
        self.model, self.optimizer, self.max_norm = model, optimizer, max_norm

    def on_batch_end(self, runner):
        runner.engine.backward_loss(runner.batch_metrics["loss"])
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)  # expect: AMP001
        runner.engine.optimizer_step(self.optimizer)
