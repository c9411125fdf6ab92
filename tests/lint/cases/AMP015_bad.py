import torch

scaler = torch.amp.GradScaler("cuda", enabled=args.amp)

for inputs, labels in loader:
    with torch.autocast("cuda", enabled=args.amp):
        loss = criterion(net(inputs), labels)
    scaler.scale(loss).backward()
    if args.amp:
        scaler.step(optimizer)
        scaler.update()
    optimizer.step()  # expect: AMP015
    optimizer.zero_grad()


class Learner:
    def __init__(self):
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def fit(self, batches):
        for batch in batches:
            self.grad_scaler.scale(self.net(batch)).backward()
            self.grad_scaler.step(self.optim)
            self.grad_scaler.update()
            if self.ema is not None:
                self.ema.update(self.net)
            self.optim.step()  # expect: AMP015
            self.optim.zero_grad()
