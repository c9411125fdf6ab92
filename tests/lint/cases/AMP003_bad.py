import torch

scaler = torch.amp.GradScaler("cuda")

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    loss.backward()  # expect: AMP003
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()


class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def training_step(self, batch):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(batch).mean()
        loss.backward()  # expect: AMP003

    def optimizer_step(self):
        self.scaler.step(self.optimizer)
        self.scaler.update()
