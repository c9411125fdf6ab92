"""The fix: the engine unscales the gradients before the callback clips them."""

import torch


class AmpEngine:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def backward_loss(self, loss):
        self.scaler.scale(loss).backward()

    def unscale_gradients(self, optimizer):
        self.scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()


class OptimizerCallback:
    def __init__(self, model, optimizer, max_norm):
        self.model, self.optimizer, self.max_norm = model, optimizer, max_norm

    def on_batch_end(self, runner):
        runner.engine.backward_loss(runner.batch_metrics["loss"])
        runner.engine.unscale_gradients(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
        runner.engine.optimizer_step(self.optimizer)
