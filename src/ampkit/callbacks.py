"""Trainer callbacks (``ampkit.callbacks``): the documented import path of
:mod:`ampkit.trainer.callbacks`."""

from ampkit.trainer.callbacks import Callback as Callback
from ampkit.trainer.callbacks import ConsoleLog as ConsoleLog
from ampkit.trainer.callbacks import MetricsFile as MetricsFile
from ampkit.trainer.callbacks import NonFiniteMonitor as NonFiniteMonitor
from ampkit.trainer.callbacks import ProgressBar as ProgressBar
from ampkit.trainer.callbacks import TensorBoard as TensorBoard
from ampkit.trainer.callbacks import TrainerView as TrainerView

__all__ = [
    "Callback",
    "ConsoleLog",
    "MetricsFile",
    "NonFiniteMonitor",
    "ProgressBar",
    "TensorBoard",
    "TrainerView",
]
