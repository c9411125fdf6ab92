"""How a batch becomes a loss: the one batch convention the Trainer, the fp8 planner, the
model resolver, bench and doctor share.

The batch convention
--------------------
* With ``loss_fn``: a batch is ``(inputs, targets)`` and the loss is
  ``loss_fn(model(inputs), targets)``.
* Without it, the model consumes the batch (``model(*batch)`` for a tuple or list,
  ``model(**batch)`` for a dict, ``model(batch)`` otherwise) and returns its loss: a scalar
  tensor, an object with ``.loss`` (Hugging Face style), a dict with ``"loss"``, or a tuple or
  list whose first scalar tensor is the loss (``(logits, loss)`` and ``(loss, logits)`` both
  work).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ampkit._tree import iter_tensors
from ampkit.errors import ConfigurationError, DataError

__all__ = ["batch_loss", "batch_output", "batch_size_of", "loss_from_output"]


def loss_from_output(output: Any) -> torch.Tensor:
    """Find the scalar loss in a model's output (see the module docstring).

    Raises:
        ConfigurationError: the output holds no scalar tensor to use as the loss.
    """
    if isinstance(output, torch.Tensor) and output.dim() == 0:
        return output
    if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor):
        return output["loss"]
    if isinstance(getattr(output, "loss", None), torch.Tensor):
        return output.loss
    if isinstance(output, (tuple, list)):
        for item in output:
            if isinstance(item, torch.Tensor) and item.dim() == 0:
                return item
    raise ConfigurationError(
        f"loss: the model returned {type(output).__name__}, which holds no scalar loss. "
        "Return the loss (a scalar tensor, `.loss`, a dict 'loss', or a tuple holding it) "
        "or pass loss_fn= and batches of (inputs, targets)."
    )


def batch_loss(
    model: nn.Module, batch: Any, loss_fn: Callable[[Any, Any], torch.Tensor] | None = None
) -> torch.Tensor:
    """The loss of one batch under the convention of the module docstring.

    Raises:
        ConfigurationError: ``loss_fn`` is given but the batch is not ``(inputs, targets)``,
            or the model's output holds no loss.
    """
    return batch_output(model, batch, loss_fn)[0]


def batch_output(
    model: nn.Module, batch: Any, loss_fn: Callable[[Any, Any], torch.Tensor] | None = None
) -> tuple[torch.Tensor, Any]:
    """The loss of one batch (as :func:`batch_loss`) and the model's output it came from, for
    what is computed from the outputs besides the loss (evaluation metrics).

    Raises:
        ConfigurationError: as :func:`batch_loss`.
        DataError: the batch holds no sample (its first tensor's leading dimension is 0):
            its mean loss would be NaN and read as a divergence.
    """
    first = next(iter_tensors(batch), None)
    if first is not None and first.dim() > 0 and first.shape[0] == 0:
        raise DataError(
            f"batch: a batch of 0 samples (its first tensor has shape {tuple(first.shape)}), "
            "whose mean loss is NaN. Every batch must hold at least one sample: check the "
            "data loader (a dataset shorter than the batch, a sampler or collate_fn that "
            "yields empty batches)."
        )
    if loss_fn is not None:
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise ConfigurationError(
                "batch: with loss_fn, each batch must be (inputs, targets); got "
                f"{type(batch).__name__}. Drop loss_fn if the model returns its loss."
            )
        inputs, targets = batch
        output = model(inputs)
        return loss_fn(output, targets), output
    try:
        if isinstance(batch, dict):
            output = model(**batch)
        elif isinstance(batch, (tuple, list)):
            output = model(*batch)
        else:
            output = model(batch)
    except TypeError:
        problem = _unfit_batch(model, batch)
        if problem is None:  # the batch fits the signature: the error is the model's own
            raise
        raise ConfigurationError(problem) from None
    return loss_from_output(output), output


def _unfit_batch(model: nn.Module, batch: Any) -> str | None:
    """Why the batch cannot be passed to the model's ``forward`` without ``loss_fn``, or None
    when it can (or the signature cannot be read)."""
    forward = getattr(getattr(model, "module", model), "forward", None)  # DDP: the inner one
    try:
        signature = inspect.signature(forward) if forward is not None else None
    except (TypeError, ValueError):
        return None
    if signature is None:
        return None
    try:
        if isinstance(batch, dict):
            signature.bind(**batch)
        elif isinstance(batch, (tuple, list)):
            signature.bind(*batch)
        else:
            signature.bind(batch)
    except TypeError:
        kind = type(batch).__name__
        size = f" of {len(batch)}" if isinstance(batch, (tuple, list, dict)) else ""
        return (
            f"loss: no loss_fn was given, so the model must take the whole batch and return "
            f"its loss, but its forward{signature} does not take a {kind}{size}. Pass "
            "loss_fn= (e.g. loss_fn=torch.nn.functional.cross_entropy) for batches of "
            "(inputs, targets), or make the model return its loss."
        )
    return None


def batch_size_of(batch: Any) -> int:
    """Samples in a batch: the leading dimension of its first tensor (1 if it holds none).

    Works for ``(inputs, targets)`` tuples, dicts of tensors (Hugging Face style) and nested
    containers alike.
    """
    first = next(iter_tensors(batch), None)
    return int(first.shape[0]) if first is not None and first.dim() > 0 else 1
