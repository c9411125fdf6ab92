"""The autocast moved into the logic's ``train_step``, around the forward only: the
handler calls it outside any autocast, and the backward of the scaled losses, reached
through ``self._backward``, is not reported as unscaled."""

import torch


class BaseHandler:
    def train_step(self, batch):
        """Override me."""
        pass


class Handler(BaseHandler):
    def __init__(self, logic, models, optimizers):
        self._logic = logic
        self.models = models
        self.optimizers = optimizers

    def train_step(self, batch):
        outs = self._logic.train_step(self.models, self.optimizers, batch)
        self._logic.step_optimizers(self.optimizers)
        return outs


class BaseLogic:
    def train_step(self, models, optimizers, batch):
        raise NotImplementedError


class Logic(BaseLogic):
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def train_step(self, models, optimizers, batch):
        with torch.autocast("cuda", dtype=torch.float16):
            outs = models["main"](batch)
        scaled = {k: self.scaler.scale(v) for k, v in outs.items()}
        self._backward(scaled)
        return outs

    def _backward(self, outs):
        for v in outs.values():
            v.backward()

    def step_optimizers(self, optimizers):
        self.scaler.step(optimizers["main"])
        self.scaler.update()
