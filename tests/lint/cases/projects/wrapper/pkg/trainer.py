import torch

from .amp import mixed


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters())

    def step(self, batch):
        with mixed():  # expect: AMP002
            loss = self.model(batch).mean()
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def cpu_step(self, batch):
        with mixed("cpu"):  # expect: AMP002, AMP009
            loss = self.model(batch).mean()
        loss.backward()
        self.optimizer.step()
