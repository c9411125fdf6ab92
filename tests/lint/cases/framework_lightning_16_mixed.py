"""The same manual-optimization step under Trainer(precision="16-mixed"): Lightning's
precision plugin scales the loss inside manual_backward, so no GradScaler is missing."""
import lightning as L
import torch


class Classifier(L.LightningModule):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=1.0)
        opt.step()
        opt.zero_grad()


trainer = L.Trainer(max_epochs=1, precision="16-mixed")
