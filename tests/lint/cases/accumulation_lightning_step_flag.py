"""Lightning manual optimisation stepping every N batches through a flag computed from the
``batch_idx`` parameter, with the count read from the hyperparameters: the loss handed to
``manual_backward`` is not divided."""

import lightning.pytorch as pl


class Vits(pl.LightningModule):
    def __init__(self, **hparams):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        optim_g = self.optimizers()
        loss = self.net_g(batch).mean()
        should_update = (batch_idx + 1) % self.hparams.train.get("accumulate_grad_batches", 1) == 0
        self.manual_backward(loss)  # expect: AMP011
        if should_update:
            optim_g.step()
            optim_g.zero_grad()
