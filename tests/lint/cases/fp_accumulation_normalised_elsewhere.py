# Gradient accumulation that is normalised somewhere other than the backward line.
import torch

# 1. the loss is divided, then handed to a wrapper that scales it
for step, batch in enumerate(loader):
    loss = compute(batch)
    loss = loss / cfg.accumulate
    with apex_amp.scale_loss(loss, optim) as scaled:
        scaled.backward()
    if (step + 1) % cfg.accumulate == 0:
        optim.step()
        optim.zero_grad()

# 2. the gradients are rescaled after accumulation
for step, batch in enumerate(loader):
    compute(batch).backward()
    if (step + 1) % cfg.accumulate == 0:
        optim.multiply_grads(1.0 / cfg.accumulate)
        optim.step()
        optim.zero_grad()

for step, batch in enumerate(loader):
    compute(batch).backward()
    if (step + 1) % micro == 0:
        for p in net.parameters():
            if p.grad is not None:
                p.grad /= micro
        optim.step()
        optim.zero_grad()


# 3. the accumulation count is passed to the function that computes the loss
class Loop:
    def run(self):
        for idx, batch in enumerate(self.batches):
            share = min(self.cfg.accumulate, self.left)
            self.one_batch(batch, share)
            if (idx + 1) % self.cfg.accumulate == 0:
                self.scaler.step(self.optim)
                self.scaler.update()

    def one_batch(self, batch, divisor):
        loss = loss_from_report(self.net(batch), divisor)
        self.scaler.scale(loss).backward()


# not normalised anywhere: still reported
for step, batch in enumerate(loader):
    total = compute(batch).sum()
    total.backward()  # expect: AMP011
    if (step + 1) % cfg.accumulate == 0:
        optim.step()
        optim.zero_grad()
