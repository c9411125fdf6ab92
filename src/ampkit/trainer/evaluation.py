"""Evaluation: the loss and the metrics of an eval set, exact over all of it.

A metric is a function ``metric(outputs, batch) -> (total, count)``, called after the forward
of every eval batch with the model's output and the batch as the model got it. Its value over
the eval set is ``sum(total) / sum(count)`` over every batch of every rank, so it is exact: a
short last batch weighs by its items, not as a whole batch (a mean of batch means would not
be), and under DDP the sums are all-reduced before the division. ::

    def accuracy(outputs, batch):           # what ampkit.accuracy does, for HF classifiers
        labels = batch["labels"]
        return (outputs.logits.argmax(-1) == labels).sum(), labels.numel()

    EvalConfig(every=100, data=val_batches, metrics={"accuracy": ampkit.accuracy})

The sums stay on the device (no synchronisation per batch); they are read once per
evaluation (and once per :attr:`EvalSums.FOLD` batches on long eval sets).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from ampkit.errors import ConfigurationError, DataError

__all__ = ["EvalResult", "EvalSums", "MetricFn", "accuracy", "check_metrics"]

#: ``metric(outputs, batch) -> (total, count)``: a scalar tensor or number each.
MetricFn = Callable[[Any, Any], Any]

#: The label that classification losses ignore (``CrossEntropyLoss(ignore_index=-100)``, the
#: Hugging Face padding label); :func:`accuracy` does not count it.
IGNORE_INDEX = -100


@dataclass(frozen=True)
class EvalResult:
    """One evaluation of the eval set.

    Attributes:
        step: the optimizer step it followed (``trainer.step`` when it ran).
        loss: mean loss over the eval batches of every rank (each batch's loss as the model
            or ``loss_fn`` reduced it, e.g. a mean over its items).
        metrics: each metric's value, ``sum(total) / sum(count)`` over every batch of every
            rank (see :mod:`ampkit.trainer.evaluation`); empty without metrics.
        batches: eval batches over every rank.
    """

    step: int
    loss: float
    metrics: dict[str, float] = field(default_factory=dict)
    batches: int = 0


def check_metrics(owner: str, metrics: object) -> None:
    """Refuse ``metrics`` unless it maps names to callables, none named ``loss``.

    Raises:
        ConfigurationError: naming ``owner``, the metric and what to pass.
    """
    if not isinstance(metrics, Mapping):
        raise ConfigurationError(
            f"{owner}: metrics={type(metrics).__name__} is invalid. Pass a mapping of names to "
            "functions (outputs, batch) -> (total, count), e.g. "
            "metrics={'accuracy': ampkit.accuracy}."
        )
    for name, fn in metrics.items():
        if not isinstance(name, str) or not name or not name.replace("_", "").isalnum():
            raise ConfigurationError(
                f"{owner}: metric name {name!r} is invalid. Use letters, digits and '_' "
                "(it becomes the metrics-row key eval_<name>)."
            )
        if name == "loss":
            raise ConfigurationError(
                f"{owner}: a metric may not be named 'loss': the mean eval loss is always "
                "reported as eval_loss. Give the metric another name."
            )
        if not callable(fn):
            raise ConfigurationError(
                f"{owner}: metric {name!r} is a {type(fn).__name__}, not a function. Pass a "
                "function (outputs, batch) -> (total, count)."
            )


def _logits_of(outputs: Any) -> torch.Tensor:
    if isinstance(outputs, torch.Tensor) and outputs.dim() > 0:
        return outputs
    if isinstance(outputs, Mapping) and isinstance(outputs.get("logits"), torch.Tensor):
        return outputs["logits"]
    if isinstance(getattr(outputs, "logits", None), torch.Tensor):
        return outputs.logits
    if isinstance(outputs, (tuple, list)):
        for item in outputs:
            if isinstance(item, torch.Tensor) and item.dim() > 0:
                return item
    raise ConfigurationError(
        f"accuracy: the model returned {type(outputs).__name__}, which holds no logits. Return "
        "the logits (a tensor, `.logits`, a dict 'logits', or a tuple holding them), or pass "
        "a metric of your own."
    )


def _labels_of(batch: Any) -> torch.Tensor:
    if isinstance(batch, Mapping):
        for key in ("labels", "label"):
            if isinstance(batch.get(key), torch.Tensor):
                return batch[key]
    elif isinstance(batch, (tuple, list)) and len(batch) == 2:
        if isinstance(batch[1], torch.Tensor):
            return batch[1]
    raise ConfigurationError(
        f"accuracy: found no labels in the batch ({type(batch).__name__}). A batch is a dict "
        "with 'labels' (Hugging Face style) or (inputs, targets); pass a metric of your own "
        "for another layout."
    )


def accuracy(outputs: Any, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-1 accuracy as ``(correct, counted)``: the arg-max of the logits against the labels.

    The logits are the output itself, its ``.logits`` or ``"logits"``, or the first
    non-scalar tensor of a tuple; the labels are the batch's ``"labels"`` (or ``"label"``),
    or ``targets`` of ``(inputs, targets)``. Logits of shape ``(..., classes)`` go with labels
    of shape ``(...)`` (sequence classification ``(B, C)`` and ``(B,)``; token classification
    ``(B, T, C)`` and ``(B, T)``); labels equal to -100 (the ignored padding label) are not
    counted. Not for causal language models, whose labels the model shifts inside.

    Raises:
        ConfigurationError: no logits or labels found, or their shapes do not go together.
    """
    logits, labels = _logits_of(outputs), _labels_of(batch)
    if logits.shape[:-1] != labels.shape:
        raise ConfigurationError(
            f"accuracy: logits of shape {tuple(logits.shape)} do not go with labels of shape "
            f"{tuple(labels.shape)}; logits (..., classes) need labels (...). Pass a metric of "
            "your own for another layout."
        )
    counted = labels != IGNORE_INDEX
    correct = (logits.argmax(dim=-1) == labels) & counted
    return correct.sum(), counted.sum()


def _scalar(name: str, what: str, value: Any, device: torch.device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ConfigurationError(
                f"eval metric {name!r}: its {what} is a tensor of shape {tuple(value.shape)}, "
                "not one number. Return the batch's sum, e.g. (correct.sum(), labels.numel())."
            )
        return value.detach().reshape(()).to(device=device, dtype=torch.float32)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(float(value), device=device)
    raise ConfigurationError(
        f"eval metric {name!r}: its {what} is a {type(value).__name__}; it must be a number or "
        "a one-element tensor."
    )


class EvalSums:
    """The per-batch sums of one evaluation: the loss, each metric's total and count, and the
    batches, kept on the device and reduced (over every rank) once.

    Each batch's values are one float32 row on the device; rows are summed in float64 on the
    host, every :attr:`FOLD` batches and at the end, so integer counts stay exact.

    Args:
        metrics: name -> ``metric(outputs, batch) -> (total, count)``.
        device: where the loss and the outputs live.
    """

    FOLD = 1024

    def __init__(self, metrics: Mapping[str, MetricFn], device: torch.device) -> None:
        self.metrics, self.device = dict(metrics), device
        self._rows: list[torch.Tensor] = []
        self._sums = torch.zeros(2 + 2 * len(self.metrics), dtype=torch.float64)

    def add(self, loss: torch.Tensor, outputs: Any, batch: Any) -> None:
        """Count one batch: its loss, and each metric's ``(total, count)`` of it.

        Raises:
            ConfigurationError: a metric returned something other than ``(total, count)``.
        """
        values = [loss.detach().reshape(()).float(), torch.ones((), device=loss.device)]
        for name, fn in self.metrics.items():
            pair = fn(outputs, batch)
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ConfigurationError(
                    f"eval metric {name!r}: returned {type(pair).__name__}, not (total, count). "
                    "A metric returns the batch's sum and the items it counted, e.g. "
                    "(correct.sum(), labels.numel()), so the value over the eval set is exact."
                )
            values += [_scalar(name, "total", pair[0], loss.device)]
            values += [_scalar(name, "count", pair[1], loss.device)]
        self._rows.append(torch.stack(values))
        if len(self._rows) >= self.FOLD:
            self._fold()

    def _fold(self) -> None:
        if self._rows:
            self._sums += torch.stack(self._rows).cpu().double().sum(dim=0)
            self._rows = []

    def result(self, step: int, *, distributed: bool) -> EvalResult:
        """The evaluation over every batch added (all-reduced over the ranks when
        ``distributed``: a collective).

        Raises:
            DataError: the eval data held no batch (on any rank), or a metric counted no item
                over the whole eval set (its value would be 0/0).
        """
        self._fold()
        sums = self._sums
        if distributed:
            # float64 over the communication device (gloo: host, NCCL: the GPU)
            sums = sums.to(self.device)
            dist.all_reduce(sums)
            sums = sums.cpu()
        loss_sum, batches, *pairs = sums.tolist()
        if not batches:
            raise DataError(
                "evaluate: the eval data produced no batch, so there is no loss to report. "
                "Pass batches to evaluate (a non-empty list or DataLoader)."
            )
        metrics: dict[str, float] = {}
        for index, name in enumerate(self.metrics):
            total, count = pairs[2 * index], pairs[2 * index + 1]
            if count == 0:
                raise DataError(
                    f"eval metric {name!r}: counted no item over the {int(batches)} eval "
                    "batches (its value would be 0/0). Check that the eval data has labels "
                    "the metric counts (accuracy skips the label -100)."
                )
            metrics[name] = total / count
        return EvalResult(step=step, loss=loss_sum / batches, metrics=metrics, batches=int(batches))
