"""A Lightning callback that trains a probe with its own optimizer, stepped through the
trainer's precision plugin's GradScaler every few batches: the plugin updates that scaler
after the optimizer steps it drives, so no ``update()`` is needed here; a scaler of the
callback's own is stepped without one and reported."""

import torch


class ProbeCallback:
    def __init__(self, probe, accumulate_grad_batches=1):
        self.probe = probe
        self.optimizer = torch.optim.AdamW(probe.parameters())
        self.accumulate_grad_batches = accumulate_grad_batches
        self.scaler = torch.amp.GradScaler("cuda")

    def optimizer_step(self, batch_idx, trainer):
        if (batch_idx + 1) % self.accumulate_grad_batches == 0:
            trainer.precision_plugin.scaler.step(self.optimizer)
            self.optimizer.zero_grad(set_to_none=True)

    def own_step(self):
        self.scaler.step(self.optimizer)  # expect: AMP005
        self.optimizer.zero_grad(set_to_none=True)
