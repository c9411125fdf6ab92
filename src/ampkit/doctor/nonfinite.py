"""``ampkit.detect_nonfinite``: which module made the first inf/NaN, at a fraction of the cost of
``torch.autograd.detect_anomaly``.

::

    with ampkit.detect_nonfinite(model) as probe:
        for batch in loader:
            loss = model(batch).loss          # forward and backward are watched
            loss.backward()
            ...
            if probe.first is not None:       # an ampkit.Finding
                print(probe.first)
                break

A module is blamed when it turned finite inputs into inf/NaN outputs (forward), or a finite
gradient of its outputs into inf/NaN gradients for its inputs or parameters (backward); the
first such call in execution order is ``probe.first``. The checks are one ``aminmax`` per
floating input and output, and run on the device without synchronising: flags are collected
and read in one transfer when ``probe.first`` is read, at ``probe.on_step()``, every 4096 calls,
and on exit. After the first finding the hooks do nothing. ``strict=True`` checks each call at
once (one host sync per module call on a GPU) and raises :class:`~ampkit.NonFiniteError` from
inside the forward or backward that produced the value, so a debugger stops right there.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ampkit.doctor.hooks import floating_tensors, observe
from ampkit.doctor.report import Finding
from ampkit.errors import ConfigurationError, NonFiniteError

__all__ = ["NonFiniteProbe", "detect_nonfinite"]

_PRECISION = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
_RESOLVE_EVERY = 4096


def _minmax(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """``[[min, max], ...]`` per non-empty tensor, as fp32 on the first tensor's device."""
    parts = [torch.stack(torch.aminmax(t.detach())).float() for t in tensors if t.numel()]
    if not parts:
        return None
    return torch.stack([p.to(parts[0].device) for p in parts])


def _bad(minmax: torch.Tensor | None) -> torch.Tensor | bool:
    """Device bool: some value is inf/NaN (min and max propagate NaN and show inf)."""
    return False if minmax is None else ~torch.isfinite(minmax).all()


@dataclass
class _Event:
    """One watched call (forward) or gradient (backward); ``flag`` is a device bool."""

    name: str
    type: str
    phase: str
    step: int
    dtype: torch.dtype | None
    flag: torch.Tensor | bool
    seen: torch.Tensor | None  # min/max of the offending tensors
    given: torch.Tensor | None  # min/max of what the module was given (inputs or output grad)
    source: str  # "outputs", "input gradients", "parameter gradients"


class _Call:
    """Per forward call: the device flag 'the gradient of my outputs was non-finite'."""

    def __init__(self) -> None:
        self.out_grad_bad: torch.Tensor | bool = False
        self.out_grad: torch.Tensor | None = None


class NonFiniteProbe:
    """Watches a model for the first inf/NaN; create it with :func:`detect_nonfinite`.

    Attributes:
        strict: raise :class:`~ampkit.NonFiniteError` at the first inf/NaN.
        step: forward passes of the model seen so far (the step recorded in findings).
    """

    def __init__(self, model: nn.Module, *, strict: bool = False) -> None:
        self.model = model
        self.strict = strict
        self.step = 0
        self._first: Finding | None = None
        self._pending: list[_Event] = []
        self._calls: dict[str, _Call] = {}
        self._stack: contextlib.ExitStack | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> NonFiniteProbe:
        """Install the hooks (``with detect_nonfinite(model)`` does this for you)."""
        if self._stack is None:
            stack = contextlib.ExitStack()
            stack.enter_context(observe(self.model, self))
            self._stack = stack
        return self

    def close(self) -> None:
        """Resolve what is pending and remove every hook (idempotent)."""
        if self._stack is not None:
            stack, self._stack = self._stack, None
            stack.close()
        self._resolve()

    def __enter__(self) -> NonFiniteProbe:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def first(self) -> Finding | None:
        """The first inf/NaN as a :class:`~ampkit.Finding`, or None while everything is finite.

        Reading it synchronises with the device once if checks are pending.
        """
        self._resolve()
        return self._first

    def on_step(self, metrics: object = None) -> None:
        """Trainer callback: resolve the checks of the step that just ended.

        Raises:
            NonFiniteError: in strict mode, if the step produced an inf/NaN.
        """
        self._resolve()
        if self.strict and self._first is not None:
            raise NonFiniteError(str(self._first), self._first)

    __call__ = on_step

    # -- observer ---------------------------------------------------------------------------

    def before_forward(
        self, name: str, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        if name == "" and self._stack is not None:
            self.step += 1

    def after_forward(
        self,
        name: str,
        module: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        output: Any,
    ) -> None:
        if self._first is not None:
            return
        inputs, outputs = floating_tensors((args, kwargs)), floating_tensors(output)
        seen, given = _minmax(outputs), _minmax(inputs)
        dtype = outputs[0].dtype if outputs else None
        if name == "":
            flag = _bad(seen)  # the model's own inputs count: a NaN batch is found here
        else:
            flag = _bad(seen) & ~_bad(given) if given is not None else _bad(seen)
        self._add(_Event(name, type(module).__name__, "forward", self.step, dtype, flag, seen,
                         given, "outputs"))
        call = _Call()
        self._calls[name] = call

        def out_grad(grad: torch.Tensor) -> None:
            if self._first is None and self._stack is not None:
                mm = _minmax([grad])
                call.out_grad, call.out_grad_bad = mm, _bad(mm)

        def made_grad(grad: torch.Tensor, source: str = "input gradients") -> None:
            if self._first is None and self._stack is not None:
                mm = _minmax([grad])
                self._add(_Event(name, type(module).__name__, "backward", self.step, grad.dtype,
                                 _bad(mm) & ~torch.as_tensor(call.out_grad_bad), mm,
                                 call.out_grad, source))

        for t in outputs:
            if t.requires_grad:
                t.register_hook(out_grad)
        for t in inputs:
            if t.requires_grad:
                t.register_hook(made_grad)

    def param_grad(self, name: str, module: nn.Module, grad: torch.Tensor) -> None:
        if self._first is not None:
            return
        call = self._calls.get(name) or _Call()
        mm = _minmax([grad])
        self._add(_Event(name, type(module).__name__, "backward", self.step, grad.dtype,
                         _bad(mm) & ~torch.as_tensor(call.out_grad_bad), mm, call.out_grad,
                         "parameter gradients"))

    # -- resolution -------------------------------------------------------------------------

    def _add(self, event: _Event) -> None:
        if self.strict:
            if bool(event.flag):
                self._first = self._finding(event)
                raise NonFiniteError(str(self._first), self._first)
            return
        self._pending.append(event)
        if len(self._pending) >= _RESOLVE_EVERY:
            self._resolve()

    def _resolve(self) -> None:
        pending, self._pending = self._pending, []
        if self._first is not None or not pending:
            return
        flags = torch.stack([torch.as_tensor(e.flag).cpu() for e in pending])  # one transfer
        hits = flags.nonzero()
        if len(hits):
            self._first = self._finding(pending[int(hits[0])])

    @staticmethod
    def _finding(event: _Event) -> Finding:
        seen = [] if event.seen is None else [tuple(r) for r in event.seen.double().tolist()]
        given = () if event.given is None else tuple(
            (lo, hi) for lo, hi in event.given.double().tolist()
        )
        dtype = "" if event.dtype is None else str(event.dtype).removeprefix("torch.")
        where = event.name or "(model)"
        if event.phase == "forward":
            origin = "from finite inputs"
            if not all(map(_finite_pair, given)):
                origin = "because the model's inputs already hold inf/NaN (check the batch)"
            what = f"its outputs ({dtype}) hold inf/NaN {origin}"
        else:
            what = f"its {event.source} ({dtype}) hold inf/NaN from a finite output gradient"
        ranges = ", ".join(f"[{lo:.3g}, {hi:.3g}]" for lo, hi in given) or "none"
        return Finding(
            module=event.name,
            kind="non-finite",
            phase=event.phase,  # type: ignore[arg-type]
            precision=_PRECISION.get(event.dtype, dtype) if event.dtype is not None else "",
            message=(
                f"{where} ({event.type}): first inf/NaN of the run, in {event.phase} at step "
                f"{event.step}: {what}; given ranges {ranges}"
            ),
            numbers={"min": min((r[0] for r in seen), default=float("nan")),
                     "max": max((r[1] for r in seen), default=float("nan"))},
            module_type=event.type,
            step=event.step,
            dtype=dtype,
            input_ranges=given,
        )


def _finite_pair(pair: tuple[float, float]) -> bool:
    return all(v == v and abs(v) != float("inf") for v in pair)


def detect_nonfinite(model: nn.Module, *, strict: bool = False) -> NonFiniteProbe:
    """Watch ``model``'s forward and backward for the first inf/NaN.

    Use it as a context manager (``with detect_nonfinite(model) as probe:``), or call
    ``.start()`` / ``.close()``; pass ``probe.on_step`` (or ``probe`` itself) as a per-step
    callback to check once per step.

    Args:
        model: the model; only hooks are added, and all are removed on exit.
        strict: raise :class:`~ampkit.NonFiniteError` inside the forward/backward that made the
            first inf/NaN (costs a host sync per module call on a GPU).

    Raises:
        ConfigurationError: ``model`` is not an ``nn.Module``.
        NonFiniteError: (strict only) at the first inf/NaN, naming module, phase, dtype,
            input ranges and step; the exception's ``finding`` holds them.
    """
    if not isinstance(model, nn.Module):
        raise ConfigurationError(
            f"detect_nonfinite: model is a {type(model).__name__}, not a torch.nn.Module."
        )
    return NonFiniteProbe(model, strict=strict)
