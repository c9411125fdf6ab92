"""A base class in a second level: it inherits the backward of engine.base."""

from .base import PlainTrainer


class LoopTrainer(PlainTrainer):
    def clip(self):
        pass
