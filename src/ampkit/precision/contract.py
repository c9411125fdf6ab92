"""The dtype contract: what a model and its optimizer really train in, said at set-up.

A precision name says what a run asked for; the tensors say what it does. A model loaded in
bf16 (``from_pretrained(dtype="auto")`` of a bf16 checkpoint) and trained with ``bf16=True``
and a plain AdamW keeps its weights, its gradients and both moments in bf16 with no fp32
master: every update smaller than half a bf16 ulp of its weight is rounded away, with no error
and no inf/NaN to show for it. :func:`dtype_contract` reads the set-up::

    contract = dtype_contract(optimizer, model=model, autocast=torch.bfloat16)
    contract.kind           # "pure-bf16": bf16 weights, no master, nothing compensates
    print(contract.to_text())

and :func:`check_dtype_contract` turns it into one warning naming the fix (an error with
``strict=True``). The engine, the Trainer, the Hugging Face and Lightning integrations, a
:class:`~ampkit.LossScaler` on its first step and ``ampkit doctor`` all call it; an optimizer is
warned about once, whichever of them sees it first.

The kinds (:data:`KINDS`): ``fp32`` (fp32 weights, no autocast), ``mixed`` (fp32 weights, the
master copy, under low-precision autocast), ``pure-bf16-compensated`` (bf16 weights whose
updates a Kahan residual or stochastic rounding keeps), ``pure-bf16`` (bf16 weights, a plain
optimizer: the silent case), ``mixed-group`` (a plain optimizer whose param group holds bf16
and fp32 weights: the bf16 ones lose updates, and fused kernels and FSDP2 refuse such a group)
and ``fp16-weights`` (refused: fp16 weights overflow and lose updates under any scaler).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ampkit._stack import user_stacklevel
from ampkit.errors import ConfigurationError, PrecisionWarning

__all__ = [
    "KINDS",
    "DtypeContract",
    "GroupContract",
    "check_dtype_contract",
    "dtype_contract",
    "summary_fields",
    "unwrap_optimizer",
]

#: Every kind of contract, in the order the module docstring explains them.
KINDS: tuple[str, ...] = (
    "fp32",
    "mixed",
    "pure-bf16-compensated",
    "pure-bf16",
    "mixed-group",
    "fp16-weights",
)

_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_WARNED: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()

_FIX = (
    "Keep the weights in fp32 (model.float(), or from_pretrained(..., dtype=torch.float32)) "
    "and train under bf16 autocast (the fp32 weights are the master copy); for pure bf16 on "
    "purpose use ampkit.Bf16True(...) (Kahan-compensated updates, fp32 optimizer state)"
)


def _name(dtype: torch.dtype) -> str:
    return _NAMES.get(dtype, str(dtype).removeprefix("torch."))


def unwrap_optimizer(optimizer: Any) -> Any:
    """The optimizer inside the wrappers of Accelerate (``.optimizer``) and Lightning
    (``._optimizer``), down to a :class:`~ampkit.CompensatedOptimizer` or a plain one."""
    from ampkit.precision.bf16_true.compensated import CompensatedOptimizer

    seen = 0
    while not isinstance(optimizer, CompensatedOptimizer) and seen < 8:
        inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "_optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer) or inner is optimizer:
            break
        optimizer, seen = inner, seen + 1
    return optimizer


def _compensation(optimizer: Any) -> str | None:
    """How the optimizer keeps the updates of low-precision weights, or None: ours
    (``kahan``/``stochastic``), torchao's ``bf16_stochastic_round``, torch-optimi's
    ``kahan_sum``."""
    from ampkit.precision.bf16_true.compensated import CompensatedOptimizer

    if isinstance(optimizer, CompensatedOptimizer):
        return None if optimizer.compensation == "none" else optimizer.compensation
    defaults = getattr(optimizer, "defaults", {}) or {}
    if defaults.get("bf16_stochastic_round"):
        return "stochastic"
    if defaults.get("kahan_sum"):
        return "kahan"
    return None


@dataclass(frozen=True)
class GroupContract:
    """One param group of the optimizer.

    Attributes:
        index: its index in ``optimizer.param_groups``.
        params: trainable parameters in it.
        weights: the dtypes of those parameters (``"fp32"``, ``"bf16"``), sorted.
        state: the dtypes of their per-element optimizer state (moments, Kahan residuals),
            read from the state when the optimizer has stepped, else what a ``torch.optim``
            optimizer will allocate (its parameter's dtype; for a compensated bf16 one what
            its ``state_dtype`` says).
        state_read: whether :attr:`state` was read from the state (False: predicted).
    """

    index: int
    params: int
    weights: tuple[str, ...]
    state: tuple[str, ...]
    state_read: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "index": self.index,
            "params": self.params,
            "weights": list(self.weights),
            "state": list(self.state),
            "state_read": self.state_read,
        }


@dataclass(frozen=True)
class DtypeContract:
    """What a model and its optimizer train in (:func:`dtype_contract`).

    Attributes:
        kind: one of :data:`KINDS`.
        weights: the dtypes of the trainable weights (``"bf16"``, ``"bf16+fp32"``).
        grads: the dtypes their gradients accumulate in (autograd's: the weight's own).
        master: what holds the exact value of a low-precision weight: ``"fp32 weights"``
            (fp32 weights under autocast), ``"kahan"`` / ``"stochastic"`` (a compensated
            optimizer), or ``"none"``.
        autocast: the forward's autocast dtype (``"bf16"``), or None without autocast.
        optimizer: the optimizer's class name (inside Accelerate's or Lightning's wrapper).
        groups: one :class:`GroupContract` per param group.
        low_precision_params: trainable fp16/bf16 parameters no compensation covers.
        first_low: the name (or shape) of the first of them, or None.
    """

    kind: str
    weights: str
    grads: str
    master: str
    autocast: str | None
    optimizer: str
    groups: tuple[GroupContract, ...]
    low_precision_params: int = 0
    first_low: str | None = None

    @property
    def silent_pure_bf16(self) -> bool:
        """bf16 weights that nothing keeps the small updates of (``pure-bf16``, ``mixed-group``)."""
        return self.kind in ("pure-bf16", "mixed-group")

    def describe(self) -> str:
        """One line: ``pure-bf16: weights bf16, grads bf16, master none, AdamW state bf16,
        autocast bf16``."""
        state = "+".join(sorted({d for g in self.groups for d in g.state})) or "none yet"
        return (
            f"{self.kind}: weights {self.weights}, grads {self.grads}, master {self.master}, "
            f"{self.optimizer} state {state}, autocast {self.autocast or 'off'}"
        )

    def to_text(self) -> str:
        """The terminal rendering (the doctor's section): the line, then one per group."""
        lines = [f"dtype contract: {self.describe()}"]
        for g in self.groups:
            how = "read" if g.state_read else "predicted"
            lines.append(
                f"  param group {g.index}: {g.params} params, weights {'+'.join(g.weights)}, "
                f"state {'+'.join(g.state) or 'none'} ({how})"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (the doctor's report, ``FitResult``, the integrations' logs)."""
        return {
            "kind": self.kind,
            "weights": self.weights,
            "grads": self.grads,
            "master": self.master,
            "autocast": self.autocast,
            "optimizer": self.optimizer,
            "groups": [g.to_dict() for g in self.groups],
            "low_precision_params": self.low_precision_params,
        }


def _state_dtypes(optimizer: Any, param: torch.Tensor, compensated: bool) -> tuple[set[str], bool]:
    state = optimizer.state.get(param) if hasattr(optimizer, "state") else None
    if state:
        found = {
            _name(v.dtype)
            for k, v in state.items()
            if k != "step" and torch.is_tensor(v) and v.is_floating_point() and v.dim() > 0
        }
        return found, True
    if compensated:  # the compensating optimizer says how it keeps the state
        return {_name(optimizer.state_dtype(param))}, False
    return {_name(param.dtype)}, False


class _Unbuilt:
    """The optimizer a contract without one assumes: one group, no state yet."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.param_groups = [{"params": params}]
        self.state: dict[torch.Tensor, Any] = {}


_Unbuilt.__name__ = "none"


def dtype_contract(
    optimizer: Any | None,
    *,
    model: nn.Module | None = None,
    autocast: torch.dtype | None = None,
) -> DtypeContract:
    """Read what ``optimizer`` (and ``model``) train in; nothing is changed.

    Args:
        optimizer: a ``torch.optim.Optimizer``, a :class:`~ampkit.CompensatedOptimizer`, or
            Accelerate's or Lightning's wrapper of one; None with ``model``: the contract of a
            plain optimizer over the model's parameters (state predicted, class ``"none"``).
        model: names the first low-precision parameter in messages (optional).
        autocast: the forward's autocast dtype; None when the forward runs without autocast.

    Raises:
        ConfigurationError: ``optimizer`` has no ``param_groups``.
    """
    if optimizer is None and model is not None:  # what a torch.optim optimizer would hold
        optimizer = _Unbuilt(list(model.parameters()))
    inner = unwrap_optimizer(optimizer)
    groups_in = getattr(inner, "param_groups", None)
    if not isinstance(groups_in, list):
        raise ConfigurationError(
            f"dtype_contract: optimizer is a {type(optimizer).__name__}, which has no "
            "param_groups. Pass the torch.optim optimizer the run steps."
        )
    compensation = _compensation(inner)
    from ampkit.precision.bf16_true.compensated import CompensatedOptimizer

    plain = (
        inner.optimizer if isinstance(inner, CompensatedOptimizer) else inner
    )  # the class the user chose
    names = {id(p): n for n, p in model.named_parameters()} if model is not None else {}
    groups: list[GroupContract] = []
    weights: set[str] = set()
    low, first = 0, None
    for index, group in enumerate(groups_in):
        trainable = [p for p in group["params"] if p.requires_grad and p.is_floating_point()]
        dtypes = {_name(p.dtype) for p in trainable}
        state: set[str] = set()
        read = False
        for p in trainable:
            found, was_read = _state_dtypes(inner, p, compensation is not None)
            state |= found
            read = read or was_read
            if p.dtype in (torch.float16, torch.bfloat16) and compensation is None:
                low += 1
                if first is None:
                    first = names.get(id(p), f"a parameter of shape {tuple(p.shape)}")
        weights |= dtypes
        groups.append(
            GroupContract(index, len(trainable), tuple(sorted(dtypes)), tuple(sorted(state)), read)
        )
    has_low = bool(weights & {"bf16", "fp16"})
    if "fp16" in weights:
        kind = "fp16-weights"
    elif not has_low:
        kind = "fp32" if autocast in (None, torch.float32) else "mixed"
    elif compensation is not None:
        kind = "pure-bf16-compensated"
    elif any(len(g.weights) > 1 for g in groups):
        kind = "mixed-group"
    else:
        kind = "pure-bf16"
    master = compensation if compensation is not None else ("none" if has_low else "fp32 weights")
    joined = "+".join(sorted(weights, key=lambda d: d != "bf16")) or "none"
    return DtypeContract(
        kind=kind,
        weights=joined,
        grads=joined,
        master=master,
        autocast=None if autocast in (None, torch.float32) else _name(autocast),
        optimizer=type(plain).__name__,
        groups=tuple(groups),
        low_precision_params=low,
        first_low=first,
    )


def check_dtype_contract(
    optimizer: Any,
    *,
    model: nn.Module | None = None,
    autocast: torch.dtype | None = None,
    caller: str = "dtype contract",
    strict: bool = False,
    intended_pure_bf16: bool = False,
) -> DtypeContract:
    """Read the contract (:func:`dtype_contract`) and warn once per optimizer about a pure-bf16
    set-up nobody asked for; return the contract.

    Args:
        caller: who checks, as messages name it (``"AmpkitCallback"``, ``"LossScaler"``).
        strict: raise instead of warning.
        intended_pure_bf16: the run asked for pure bf16 by name (Lightning's
            ``"bf16-true"``): nothing is said about it. A
            :class:`~ampkit.CompensatedOptimizer` counts as asked for.

    Raises:
        ConfigurationError: fp16 weights (always), or with ``strict`` a silent pure-bf16
            set-up.

    Warns:
        PrecisionWarning: a silent pure-bf16 set-up (once per optimizer).
    """
    if not isinstance(strict, bool):
        raise ConfigurationError(f"{caller}: strict={strict!r} is invalid. Use True or False.")
    contract = dtype_contract(optimizer, model=model, autocast=autocast)
    if contract.kind == "fp16-weights":
        raise ConfigurationError(
            f"{caller}: the optimizer's weights are fp16 ({contract.describe()}, the first "
            f"{contract.first_low}); fp16 weights lose every update under half an fp16 ulp and "
            "overflow to inf/NaN under a loss scaler. Keep the weights in fp32 and train under "
            "fp16 autocast with a loss scaler (model.float())."
        )
    key = unwrap_optimizer(optimizer)
    from ampkit.precision.bf16_true.compensated import CompensatedOptimizer

    # a CompensatedOptimizer's compensation was chosen by name ("none" warns where it is set)
    if not contract.silent_pure_bf16 or intended_pure_bf16 or isinstance(key, CompensatedOptimizer):
        return contract
    if not strict and key in _WARNED:
        return contract
    message = (
        f"{caller}: this run trains in pure bf16 with no fp32 master ({contract.describe()}): "
        f"{contract.low_precision_params} trainable parameters are bf16 (the first "
        f"{contract.first_low}) and nothing compensates the rounding, so every update smaller "
        f"than half a bf16 ulp of its weight is lost (late-stage loss plateaus above an "
        f"fp32-master run). {_FIX}."
    )
    if strict:
        raise ConfigurationError(message + " (strict=True makes this an error.)")
    _WARNED.add(key)
    warnings.warn(message, PrecisionWarning, stacklevel=user_stacklevel())
    return contract


def summary_fields(contract: DtypeContract | None) -> Mapping[str, Any]:
    """The flat, logger-ready fields of a contract (``ampkit/contract``, ...), or none."""
    if contract is None:
        return {}
    return {
        "ampkit/contract": contract.kind,
        "ampkit/weights": contract.weights,
        "ampkit/master": contract.master,
        "ampkit/optimizer_state": "+".join(sorted({d for g in contract.groups for d in g.state})),
    }
