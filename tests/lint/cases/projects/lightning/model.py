import lightning as L
import torch


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.layer(batch).mean()
        self.manual_backward(loss)
        opt.step()
        opt.zero_grad()
