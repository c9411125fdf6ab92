"""The fixed trainer divides the loss by N before the backward; a method that steps every
call and only logs every N calls accumulates nothing."""


class Agent:
    def __init__(self, model, optimizer, update_freq):
        self.model = model
        self.optimizer = optimizer
        self.update_freq = update_freq
        self._accum = 0
        self.calls = 0

    def train_step(self, batch):
        loss = self.model(batch) / self.update_freq
        loss.backward()
        self._accum = (self._accum + 1) % self.update_freq
        if self._accum != 0:
            return
        self.optimizer.step()
        self.optimizer.zero_grad()

    def plain_step(self, batch, log_every):
        loss = self.model(batch)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.calls += 1
        if self.calls % log_every == 0:
            print(loss.item())


class SplitAgent:
    def backward(self, loss):
        update_freq = self.opt.get("update_freq", 1)
        if update_freq > 1:
            loss = loss / update_freq
        loss.backward()

    def update_params(self):
        update_freq = self.opt.get("update_freq", 1)
        if update_freq > 1:
            self._number_grad_accum = (self._number_grad_accum + 1) % update_freq
            if self._number_grad_accum != 0:
                return
        self.optimizer.step()


class ClosureModule:
    """A step given a closure runs the closure's own backward (Lightning, LBFGS)."""

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()

        def closure():
            loss = self.compute(batch)
            self.manual_backward(loss)
            return loss

        closure()
        if batch_idx % 2 == 0:
            opt.step(closure=closure)
            opt.zero_grad()
