# Several optimizers stepped through one scaler, updated once after the loop.
import torch

scaler = torch.amp.GradScaler("cuda")

for batch in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = net(batch)
    scaler.scale(loss).backward()
    for opt in optimizers:
        scaler.step(opt)
    scaler.update()
    for opt in optimizers:
        opt.zero_grad()


class Engine:
    def train_batch(self, microbatches):
        while True:
            try:
                for micro in microbatches:
                    self.scaler.scale(self.net(micro)).backward()
                for opt in self.optimizers:
                    self.scaler.step(opt)
            except RuntimeError:
                self.shrink()
                continue
            return

    def fit(self, loader):
        for batch in loader:
            self.train_batch(batch)
            self.scaler.update()


# updating only once per epoch is still a bug
for epoch in range(epochs):
    for batch in loader:
        scaler.scale(net(batch)).backward()
        scaler.step(optimizer)  # expect: AMP005
        optimizer.zero_grad()
    scaler.update()
