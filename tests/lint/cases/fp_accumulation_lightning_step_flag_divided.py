"""The same Lightning step, with the loss divided by the count the flag steps by."""

import lightning.pytorch as pl


class Vits(pl.LightningModule):
    def __init__(self, **hparams):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        optim_g = self.optimizers()
        accumulate = self.hparams.train.get("accumulate_grad_batches", 1)
        loss = self.net_g(batch).mean()
        should_update = (batch_idx + 1) % accumulate == 0
        self.manual_backward(loss / accumulate)
        if should_update:
            optim_g.step()
            optim_g.zero_grad()
