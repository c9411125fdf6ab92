"""A trainer method runs once per batch and steps every N calls, counted by an attribute it
advances; the loss is never divided by N. Both spellings of the guard: a remainder tested
after the backward, and an early return."""


class Agent:
    def __init__(self, model, optimizer, update_freq):
        self.model = model
        self.optimizer = optimizer
        self.update_freq = update_freq
        self._accum = 0
        self.calls = 0

    def train_step(self, batch):
        loss = self.model(batch)
        loss.backward()  # expect: AMP011
        self._accum = (self._accum + 1) % self.update_freq
        if self._accum != 0:
            return
        self.optimizer.step()
        self.optimizer.zero_grad()

    def other_step(self, batch):
        loss = self.model(batch)
        loss.backward()  # expect: AMP011
        self.calls += 1
        if self.calls % self.update_freq == 0:
            self.optimizer.step()
            self.optimizer.zero_grad()


class SplitAgent:
    """The backward and the every-N step in two methods of the class, the early return
    nested under the option that turns accumulation on."""

    def backward(self, loss):
        loss.backward()  # expect: AMP011

    def update_params(self):
        update_freq = self.opt.get("update_freq", 1)
        if update_freq > 1:
            self._number_grad_accum = (self._number_grad_accum + 1) % update_freq
            if self._number_grad_accum != 0:
                return
        self.optimizer.step()
