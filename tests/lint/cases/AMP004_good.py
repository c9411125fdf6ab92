import torch

scaler = torch.amp.GradScaler("cuda")
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 10)

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad()


class Trainer:
    def __init__(self, fp16):
        self.scaler = torch.amp.GradScaler("cuda") if fp16 else None

    def backward(self, loss):
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def step(self):
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()


def sparse_update(scaler, dense_opt, sparse_opt):
    scaler.step(dense_opt)
    scaler.unscale_(sparse_opt)
    torch.nn.utils.clip_grad_norm_(sparse_params, 1.0)
    scaler.step(sparse_opt)
    scaler.update()
