# The condition that decides whether the loss is scaled can have any name: the branch
# structure (scale in one arm, plain step in the other) decides, not the word "amp".
import torch


class Runner:
    def step_batch(self, batch, grad_scaling):
        loss = self.net(batch)
        if grad_scaling:
            loss = self.scaler.scale(loss)
        loss.backward()
        if grad_scaling:
            self.scaler.step(self.optim)
            self.scaler.update()
        else:
            self.optim.step()


def train(net, optim, scaler, batches, loss_scaling_on):
    for batch in batches:
        loss = net(batch)
        if loss_scaling_on:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if not loss_scaling_on:
            optim.step()
        else:
            scaler.step(optim)
            scaler.update()


# stepping directly after an unconditionally scaled loss is still a bug
def broken(net, optim, scaler, batch):
    scaler.scale(net(batch)).backward()
    optim.step()  # expect: AMP004
    scaler.update()
