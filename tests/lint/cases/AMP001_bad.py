import torch
from torch.amp import GradScaler as Scaler
from torch.nn.utils import clip_grad_norm_

model = torch.nn.Linear(4, 4).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = Scaler("cuda")

for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    clip_grad_norm_(model.parameters(), 1.0)  # expect: AMP001
    scaler.step(optimizer)
    scaler.update()


def train_step(model, optimizer, scaler, batch):
    with torch.autocast("cuda"):
        loss = model(batch).mean()
    scaled = scaler.scale(loss)
    scaled.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)  # expect: AMP001
    scaler.step(optimizer)
    scaler.update()


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters())
        self.scaler = torch.amp.GradScaler("cuda")

    def training_step(self, batch):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(batch).mean()
        self.scaler.scale(loss).backward()

    def optimizer_step(self):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)  # expect: AMP001
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()
