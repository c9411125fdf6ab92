"""A handler's autocast around ``self._logic.train_step(...)``: the receiver's class is not
known, and three classes of the file define ``train_step``, but only one has a body beside
the base classes' stubs (and the handler's own, which makes the call). That one runs the
backward, through ``self._backward`` of its own class, on a dict of scaled losses."""

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
        with torch.autocast("cuda", dtype=torch.float16):
            outs = self._logic.train_step(self.models, self.optimizers, batch)  # expect: AMP012
        self._logic.step_optimizers(self.optimizers)
        return outs


class BaseLogic:
    def train_step(self, models, optimizers, batch):
        raise NotImplementedError


class Logic(BaseLogic):
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def train_step(self, models, optimizers, batch):
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
