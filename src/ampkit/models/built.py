"""The one carrier of a resolved ``--model``: :class:`BuiltModel`.

Every command reads the same record: ``ampkit bench`` trains copies of ``model`` on
``batch(step)`` with ``make_optimizer`` and counts ``items_per_step`` in ``unit`` (FLOPs from
``flops_per_step`` when known), ``ampkit doctor`` runs :meth:`BuiltModel.closure`, and
``ampkit export`` traces ``model`` on :attr:`BuiltModel.example_inputs`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ampkit._tree import iter_tensors
from ampkit._validate import is_int
from ampkit.errors import ConfigurationError
from ampkit.precision.batches import batch_loss

__all__ = [
    "UNITS",
    "BuiltModel",
    "call_model",
    "default_optimizer",
    "logits_loss",
    "model_error",
    "refuse_meta",
]

#: What ``items_per_step`` may count.
UNITS = ("samples", "tokens")


def model_error(message: str) -> ConfigurationError:
    """A :class:`~ampkit.errors.ConfigurationError` about the ``model`` argument: the message
    reads ``model: ...`` and the command line shows it as ``--model: ...``."""
    return ConfigurationError(f"model: {message}", argument="model")


def refuse_meta(spec: str, model: nn.Module | None, data: Any = None) -> None:
    """Refuse a model or inputs (``data``: a batch, inputs, targets) on the ``meta`` device.

    Meta tensors have a shape but no values: nothing can be measured, trained or exported on
    them, and torch's errors about them (``unsupported scalarType``, ``unsupported autocast
    device_type 'meta'``) do not say so.

    Raises:
        ConfigurationError: a parameter, buffer or input tensor is a meta tensor (the message
            names the first and the count).
    """
    if model is not None:
        meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
        if meta:
            more = f" and {len(meta) - 1} more" if len(meta) > 1 else ""
            raise model_error(
                f"{spec}'s model is on the meta device (no data): {meta[0]!r}{more} hold no "
                "values. Build it on a real device in the factory (cpu, cuda), or give it "
                "weights first (model.to_empty(device='cpu'), then load_state_dict)."
            )
    tensors = [t for t in iter_tensors(data) if t.is_meta]
    if tensors:
        shapes = ", ".join("x".join(map(str, t.shape)) or "scalar" for t in tensors[:3])
        raise model_error(
            f"{spec}'s inputs are on the meta device (no data): {len(tensors)} tensor(s) "
            f"({shapes}) hold no values. Create the batch on a real device in the factory "
            "(cpu, cuda)."
        )


def default_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """AdamW with lr 1e-3: the optimizer a model without its own gets."""
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def call_model(model: nn.Module | Callable[..., Any], inputs: Any) -> Any:
    """``model(**inputs)`` for a dict, ``model(*inputs)`` for a tuple or list, else
    ``model(inputs)``: how Hugging Face models and plain modules take their inputs."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def _logits(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    found = output.get("logits") if isinstance(output, dict) else getattr(output, "logits", None)
    if isinstance(found, torch.Tensor):
        return found
    for tensor in iter_tensors(output):
        if tensor.is_floating_point() and tensor.dim() > 0:
            return tensor
    raise model_error(
        f"the model returned {type(output).__name__}, which holds no logits. Return "
        "a tensor, an object or dict with 'logits', or compute the loss in the model and "
        "return (model, batch) from the factory."
    )


def logits_loss(output: Any, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the output's logits for integer targets (sequence outputs flattened,
    ``-100`` ignored), mean squared error for float targets.

    Raises:
        ConfigurationError: the output holds no logits tensor.
    """
    logits = _logits(output)
    if targets.is_floating_point():
        return F.mse_loss(logits.float(), targets)
    if logits.dim() == targets.dim() + 1 and logits.dim() > 2:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return F.cross_entropy(logits, targets)


@dataclass(frozen=True, kw_only=True)
class BuiltModel:
    """A model, a batch for every step, how a batch becomes the loss, and what one step is.

    Attributes:
        name: the spec it was built from (``gpt``, ``hf:gpt2``, ``mypkg.models:build``).
        model: the model, in fp32 on the CPU. Tools that train copies deep-copy it.
        batch: ``batch(step)`` -> the batch of that step on the CPU (the same batch for the
            same step). A tuple ``(inputs, targets)`` when ``loss_fn`` is set; otherwise what
            the model consumes (a dict of tensors for Hugging Face models, ``(idx, targets)``
            for the built-in GPT, which returns ``(logits, loss)``).
        loss_fn: ``loss_fn(outputs, targets)``, as ``Trainer(loss_fn=...)``; None when the
            model returns its loss.
        items_per_step: samples (or tokens) in one batch, for throughput.
        unit: what ``items_per_step`` counts: ``"samples"`` or ``"tokens"``.
        batch_size: samples in one batch.
        description: one line on the model's shape.
        flops_per_step: model FLOPs of one training step (forward and backward) when known in
            closed form; None lets ``ampkit bench`` count them.
        make_optimizer: ``make_optimizer(model)`` -> the optimizer to train it with (default
            AdamW, lr 1e-3).
        config: the model's own configuration when it has one (the
            :class:`~ampkit.models.gpt.GPTConfig` of ``gpt``, the transformers config of an
            ``hf:`` model); None otherwise.
        tokenizer: the model's tokenizer when it has one (an ``hf:`` local folder's); None
            otherwise.
        loss_keys: keys of a dict batch that only ask for the loss (``labels``, a contrastive
            model's ``return_loss``): :attr:`example_inputs` leaves them out.

    Raises:
        ConfigurationError: a field has the wrong type (the message names it).
    """

    name: str
    model: nn.Module
    batch: Callable[[int], Any]
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None
    items_per_step: int
    unit: str = "samples"
    batch_size: int
    description: str = ""
    flops_per_step: float | None = None
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer] = field(default=default_optimizer)
    config: Any = None
    tokenizer: Any = None
    loss_keys: tuple[str, ...] = ("labels",)

    def __post_init__(self) -> None:
        problems = [
            f"{name} must be {rule}"
            for name, ok, rule in [
                ("name", isinstance(self.name, str) and bool(self.name), "a non-empty string"),
                ("model", isinstance(self.model, nn.Module), "a torch.nn.Module"),
                ("batch", callable(self.batch), "a function step -> batch"),
                (
                    "loss_fn",
                    self.loss_fn is None or callable(self.loss_fn),
                    "None or a function (outputs, targets) -> loss",
                ),
                ("items_per_step", is_int(self.items_per_step, 1), "an integer >= 1"),
                ("unit", self.unit in UNITS, "'samples' or 'tokens'"),
                ("batch_size", is_int(self.batch_size, 1), "an integer >= 1"),
                ("make_optimizer", callable(self.make_optimizer), "a function model -> optimizer"),
                (
                    "loss_keys",
                    isinstance(self.loss_keys, tuple)
                    and all(isinstance(k, str) for k in self.loss_keys),
                    "a tuple of strings",
                ),
            ]
            if not ok
        ]
        if problems:
            raise ConfigurationError(
                "BuiltModel: " + "; ".join(problems) + ". Required fields: name, model, "
                "batch, items_per_step, batch_size (see docs/bench.md)."
            )

    @property
    def example_batch(self) -> Any:
        """The batch of step 0 (an input example, e.g. for tracing or export)."""
        return self.batch(0)

    @property
    def example_inputs(self) -> Any:
        """What the model takes at inference on step 0's batch: the inputs of an ``(inputs,
        targets)`` batch, a dict batch without its :attr:`loss_keys`, else the whole batch."""
        batch = self.example_batch
        if self.loss_fn is not None:
            return batch[0]
        if isinstance(batch, dict):
            return {k: v for k, v in batch.items() if k not in self.loss_keys}
        return batch

    @property
    def tokens_per_sample(self) -> int | None:
        """Tokens in one sample when the unit is tokens (for ``Trainer(tokens_per_sample=)``)."""
        return self.items_per_step // self.batch_size if self.unit == "tokens" else None

    @property
    def parameter_count(self) -> int:
        """Parameters of the model."""
        return sum(p.numel() for p in self.model.parameters())

    def loss(self, model: nn.Module | Callable[..., Any], batch: Any) -> torch.Tensor:
        """The loss of ``batch`` for ``model`` (this model or a copy of it).

        Without ``loss_fn`` this is :func:`ampkit.precision.batches.batch_loss`; with it, the
        batch is ``(inputs, targets)`` and the loss ``loss_fn(call_model(model, inputs),
        targets)`` (dict inputs become keyword arguments).

        Raises:
            ConfigurationError: the batch or the model's output does not fit the convention.
        """
        if self.loss_fn is None:
            return batch_loss(model, batch)  # type: ignore[arg-type]
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise model_error(
                f"{self.name}: with a loss function each batch must be "
                f"(inputs, targets); got {type(batch).__name__}."
            )
        inputs, targets = batch
        return self.loss_fn(call_model(model, inputs), targets)

    def closure(
        self, model: nn.Module | None = None, device: torch.device | str | None = None
    ) -> Callable[[], torch.Tensor]:
        """A function that runs the forward pass on the next step's batch and returns the
        loss (what :func:`ampkit.diagnose` takes): step 0's batch first, then step 1's, ..."""
        from ampkit._tree import to_device

        target = self.model if model is None else model
        where = torch.device(device) if device is not None else None
        calls = [0]

        def closure() -> torch.Tensor:
            batch = self.batch(calls[0])
            calls[0] += 1
            return self.loss(target, to_device(batch, where) if where is not None else batch)

        return closure
