from trainer import CycleTrainer


def _plain_backward(loss):
    loss.backward()


class CycleBase(CycleTrainer):
    def backward(self, loss):
        _plain_backward(loss)

    def step(self):
        self.optimizer.step()
