"""The project's stand-in for a GradScaler when it trains in full precision: ``scale``
returns the loss unchanged, ``step`` steps the optimizer."""


class IdentityScaler:
    def scale(self, loss):
        return loss

    def step(self, optimizer):
        optimizer.step()

    def update(self):
        pass


class HalvingScaler:
    """Scales for real (a fixed factor): still a scaler."""

    def scale(self, loss):
        return loss * 1024.0

    def step(self, optimizer):
        optimizer.step()

    def update(self):
        pass
