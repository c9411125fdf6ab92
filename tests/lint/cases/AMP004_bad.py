import torch

scaler = torch.amp.GradScaler("cuda")

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    optimizer.step()  # expect: AMP004
    scaler.update()
    optimizer.zero_grad()


class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def training_step(self, batch):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(batch).mean()
        self.scaler.scale(loss).backward()

    def optimizer_step(self):
        self.optimizer.step()  # expect: AMP004
        self.scaler.update()


def sparse_update(scaler, dense_opt, sparse_opt):
    scaler.step(dense_opt)
    scaler.unscale_(sparse_opt)
    sparse_opt.step()  # expect: AMP004
    scaler.update()
