"""Lightning manual optimization with a hand-written fp16 autocast and no GradScaler.

The Trainer is built at its default (32-bit) precision, so manual_backward does not scale
the loss: small fp16 gradients flush to zero. self.optimizers() and self.clip_gradients
are the optimizer and the clip.
"""
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
        with torch.autocast("cuda", dtype=torch.float16):  # expect: AMP002
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=1.0)
        opt.step()
        opt.zero_grad()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class LateClip(L.LightningModule):
    def training_step(self, batch, batch_idx):
        first = self.optimizers()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.net(batch).mean()
        self.manual_backward(loss)
        first.step()
        self.clip_gradients(first, gradient_clip_val=1.0)  # expect: AMP016
        first.zero_grad()


trainer = L.Trainer(max_epochs=1)
