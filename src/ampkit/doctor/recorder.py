"""The observer behind :func:`ampkit.diagnose`: what each module did during the fp32 steps.

Per module it keeps activation and gradient :class:`~ampkit.precision.stats.RangeStats`, and per
call the facts needed to tell where a problem *starts*: a module is an origin of overflow or
inf/NaN when its own inputs were clean and its outputs were not (forward), or when the gradient
of its outputs was clean and the gradients it produced (for its inputs and own parameters) were
not (backward).

On the first step each module is also re-run, before its real forward, under autocast in each
candidate format from clones of the same fp32 inputs (no grad, the RNG forked, buffers restored,
stateful arguments such as a key/value cache copied, see :mod:`ampkit.doctor.isolation`), so the
relative error of its output is its own, not inherited from upstream layers.

It also notes which module made each module's first input (the innermost module whose output
it is, else the module whose own code computed it), and which parameter-free modules kept
their inputs' range on every call: what :mod:`ampkit.doctor.passthrough` needs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from ampkit._tree import floating_tensors
from ampkit.doctor.hooks import on_grad
from ampkit.doctor.isolation import isolated_copy
from ampkit.doctor.passthrough import magnitudes, passes_through_by_type
from ampkit.precision.devices import fork_rng
from ampkit.precision.stats import FormatLimits, RangeStats

__all__ = ["CallRecord", "ModuleState", "Recorder", "tensor_ranges"]

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def tensor_ranges(
    tensors: Sequence[torch.Tensor],
) -> tuple[float, bool, tuple[tuple[float, float], ...]]:
    """``(largest finite magnitude, any inf/NaN, (min, max) per tensor)``; one host sync."""
    if not tensors:
        return 0.0, False, ()
    parts = []
    for t in tensors:
        x = t.detach().reshape(-1).float()
        if x.numel() == 0:
            parts.append(torch.zeros(4, device=x.device))
            continue
        finite = torch.isfinite(x)
        safe = torch.where(finite, x, torch.zeros((), device=x.device))
        parts.append(torch.stack([safe.abs().max(), (~finite).any().float(), x.min(), x.max()]))
    values = torch.stack([p.to(parts[0].device) for p in parts]).double().tolist()
    return (
        max(v[0] for v in values),
        any(v[1] > 0 for v in values),
        tuple((v[2], v[3]) for v in values),
    )


@dataclass
class CallRecord:
    """One forward call, and the gradients that later flowed through it.

    Attributes:
        step: 1-based step of the call.
        out_grad_max, out_grad_nonfinite: gradient of the call's outputs.
        made_grad_max, made_grad_nonfinite: gradients the call's backward produced (for its
            inputs and for the module's own parameters).
    """

    step: int
    out_grad_max: float = 0.0
    out_grad_nonfinite: bool = False
    made_grad_max: float = 0.0
    made_grad_nonfinite: bool = False

    def saw_out_grad(self, grad: torch.Tensor) -> None:
        peak, bad, _ = tensor_ranges([grad])
        self.out_grad_max = max(self.out_grad_max, peak)
        self.out_grad_nonfinite |= bad

    def saw_made_grad(self, grad: torch.Tensor) -> None:
        peak, bad, _ = tensor_ranges([grad])
        self.made_grad_max = max(self.made_grad_max, peak)
        self.made_grad_nonfinite |= bad


@dataclass
class ModuleState:
    """What one module did over the diagnosed steps.

    Attributes:
        forward, backward: statistics of its outputs, and of its output and parameter grads.
        input_max: largest finite magnitude among its inputs over all calls.
        nonfinite_origin: ``(step, input ranges, dtype)`` of the first call that turned finite
            inputs into inf/NaN outputs, else None.
        overflow_origin: per format, the first call whose outputs overflowed it while its
            inputs fit: ``(step, largest input, largest output)``.
        rel_error: per format, the largest relative error of its output (first step).
        replay_errors: per format, why the re-run failed, if it did.
        pass_type: a pass-through module by its type (Identity, Dropout, DropPath, ...).
        range_kept: for a module without parameters, whether every call's outputs stayed in
            its inputs' magnitude range (None: not measured, it has parameters).
        input_from: the module that made its first call's first input (``None``: the model's
            inputs, or no floating input).
    """

    name: str
    type: str
    forward: RangeStats
    backward: RangeStats
    calls: int = 0
    input_max: float = 0.0
    nonfinite_origin: tuple[int, tuple[tuple[float, float], ...], str] | None = None
    overflow_origin: dict[str, tuple[int, float, float]] = field(default_factory=dict)
    rel_error: dict[str, float] = field(default_factory=dict)
    replay_errors: dict[str, str] = field(default_factory=dict)
    records: list[CallRecord] = field(default_factory=list)
    pass_type: bool = False
    range_kept: bool | None = None
    input_from: str | None = None

    @property
    def passes_through(self) -> bool:
        """Whether the module only forwards its inputs' values (by type, or measured)."""
        return bool(self.name) and (self.pass_type or self.range_kept is True)


class Recorder:
    """The :class:`~ampkit.doctor.hooks.ModuleObserver` filling a :class:`ModuleState` per module.

    Args:
        model: the model (for names and types).
        limits: the formats to measure against.
        replay: formats (``fp16``/``bf16``) to re-run each module in on the first step.

    Attributes:
        on_module_rerun: when set, called with the number of distinct modules re-run so far,
            after each new one (the doctor's progress).
    """

    def __init__(
        self, model: nn.Module, limits: dict[str, FormatLimits], replay: Sequence[str] = ()
    ) -> None:
        self.limits = limits
        self.replay = tuple(replay)
        self.step = 0
        self.active = True
        self._replaying = False
        self._pending: dict[int, list[dict[str, list[torch.Tensor] | str]]] = {}
        self._made_by: WeakIdKeyDictionary = WeakIdKeyDictionary()  # tensor -> module name
        self._running: list[str] = []
        self._measure_range: set[str] = set()
        self.states: dict[str, ModuleState] = {}
        for name, m in model.named_modules():
            state = ModuleState(name, type(m).__name__, RangeStats(limits), RangeStats(limits))
            state.pass_type = passes_through_by_type(m)
            if not state.pass_type and not any(True for _ in m.parameters()):
                self._measure_range.add(name)
            self.states[name] = state
        self.on_module_rerun: Callable[[int], None] | None = None
        self._rerun_modules: set[str] = set()

    # -- forward ----------------------------------------------------------------------------

    def before_forward(
        self, name: str, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        if self._replaying or not self.active:
            return
        self._running.append(name)
        if self.step != 1 or not self.replay:
            return
        self._pending.setdefault(id(module), []).append(self._rerun(module, args, kwargs))
        if name not in self._rerun_modules:
            self._rerun_modules.add(name)
            if self.on_module_rerun is not None:
                self.on_module_rerun(len(self._rerun_modules))

    def _rerun(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> dict[str, list[torch.Tensor] | str]:
        tensors = floating_tensors((args, kwargs))
        device = tensors[0].device if tensors else next(module.parameters(), torch.empty(0)).device
        buffers = {n: b.detach().clone() for n, b in module.named_buffers()}
        results: dict[str, list[torch.Tensor] | str] = {}
        self._replaying = True
        try:
            for fmt in self.replay:
                with (
                    torch.no_grad(),
                    fork_rng(device),
                    # no weight-cast cache: the fp16 copy of a weight cached in one re-run
                    # would otherwise be reused by the bf16 re-run inside the same outer region
                    torch.autocast(device.type, dtype=_DTYPES[fmt], cache_enabled=False),
                ):
                    try:
                        copied_args, copied_kwargs = isolated_copy((args, kwargs))
                        out = module(*copied_args, **copied_kwargs)
                    except RuntimeError as exc:  # e.g. an op without a kernel for this dtype
                        results[fmt] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                        continue
                results[fmt] = [t.detach().float() for t in floating_tensors(out)]
        finally:
            self._replaying = False
            with torch.no_grad():
                for n, b in module.named_buffers():
                    b.copy_(buffers[n])
        return results

    def after_forward(
        self,
        name: str,
        module: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        output: Any,
    ) -> None:
        if self._replaying or not self.active:
            return
        if name in self._running:  # the innermost call of this module ends
            del self._running[len(self._running) - 1 - self._running[::-1].index(name)]
        state = self.states[name]
        state.calls += 1
        inputs, outputs = floating_tensors((args, kwargs)), floating_tensors(output)
        for tensor in outputs:
            state.forward.add(tensor)
        in_max, in_bad, in_ranges = tensor_ranges(inputs)
        out_max, out_bad, _ = tensor_ranges(outputs)
        state.input_max = max(state.input_max, in_max)
        self._trace(state, inputs, outputs, out_bad and not in_bad)
        if out_bad and not in_bad and state.nonfinite_origin is None:
            dtype = str(outputs[0].dtype).removeprefix("torch.") if outputs else ""
            state.nonfinite_origin = (self.step, in_ranges, dtype)
        for fmt, lim in self.limits.items():
            if lim.per_tensor_scaled or fmt in state.overflow_origin or in_bad:
                continue
            if out_max >= lim.overflow_at > in_max:
                state.overflow_origin[fmt] = (self.step, in_max, out_max)
        pending = self._pending.get(id(module))
        if pending:
            for fmt, low in pending.pop().items():
                if isinstance(low, str):
                    state.replay_errors[fmt] = low
                    continue
                error = _rel_error([t.detach() for t in outputs], low)
                if error is not None:
                    state.rel_error[fmt] = max(state.rel_error.get(fmt, 0.0), error)
        record = CallRecord(self.step)
        state.records.append(record)
        on_grad(outputs, lambda g: self._out_grad(state, record, g))
        on_grad(inputs, lambda g: self._made_grad(record, g))

    def _trace(
        self,
        state: ModuleState,
        inputs: list[torch.Tensor],
        outputs: list[torch.Tensor],
        made_nonfinite: bool,
    ) -> None:
        """Note who made the module's input, mark who made its outputs (innermost first:
        children's hooks run before their parent's), and measure whether it kept the range."""
        if state.calls == 1 and inputs:
            enclosing = self._running[-1] if self._running else None
            state.input_from = self._made_by.get(inputs[0], enclosing)
        for tensor in outputs:
            if tensor not in self._made_by:
                self._made_by[tensor] = state.name
        if state.name not in self._measure_range or state.range_kept is False:
            return
        if not inputs or not outputs or made_nonfinite:
            state.range_kept = False
            return
        in_max, in_min = magnitudes(inputs)
        out_max, out_min = magnitudes(outputs)
        state.range_kept = out_max <= in_max and out_min >= in_min

    # -- backward ---------------------------------------------------------------------------

    def _out_grad(self, state: ModuleState, record: CallRecord, grad: torch.Tensor) -> None:
        if self.active:
            if grad.numel() > 1:  # a scalar output is a loss: its gradient is the fp32 seed
                state.backward.add(grad)
            record.saw_out_grad(grad)

    def _made_grad(self, record: CallRecord, grad: torch.Tensor) -> None:
        if self.active:
            record.saw_made_grad(grad)

    def param_grad(self, name: str, module: nn.Module, grad: torch.Tensor) -> None:
        if not self.active:
            return
        state = self.states[name]
        state.backward.add(grad)
        if state.records:
            state.records[-1].saw_made_grad(grad)


def _rel_error(reference: list[torch.Tensor], low: list[torch.Tensor]) -> float | None:
    """Relative L2 error of ``low`` against ``reference``; None when not comparable."""
    if not reference or len(reference) != len(low):
        return None
    if any(a.shape != b.shape for a, b in zip(reference, low, strict=True)):
        return None
    ref = torch.cat([t.reshape(-1).float() for t in reference])
    got = torch.cat([t.reshape(-1).float().to(ref.device) for t in low])
    if not bool(torch.isfinite(ref).all()):
        return None
    if not bool(torch.isfinite(got).all()):
        return math.inf
    diff, norm = float((got - ref).norm()), float(ref.norm())
    if diff == 0:
        return 0.0
    return diff / norm if norm > 0 else math.inf
