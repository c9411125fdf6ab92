"""The scaled loss is reduced before its backward (``loss = scaler.scale(loss)`` under a
scaler test, then ``loss.mean().backward()``): still the scaled loss, so the scaler's step
is right. Nothing to report."""


class Algorithm:
    def __init__(self, optimizer, grad_scaler=None):
        self._optimizer = optimizer
        self._grad_scaler = grad_scaler

    def update(self, loss):
        if self._grad_scaler is not None:
            loss = self._grad_scaler.scale(loss)
        loss.mean().backward()
        if self._grad_scaler is not None:
            self._grad_scaler.step(self._optimizer)
            self._grad_scaler.update()
        else:
            self._optimizer.step()
        self._optimizer.zero_grad()
