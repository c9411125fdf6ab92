"""``ampkit.detect_nonfinite``: which module made the first inf/NaN, at a fraction of the cost of
``torch.autograd.detect_anomaly``.

::

    with ampkit.detect_nonfinite(model) as probe:
        for batch in loader:
            loss = model(batch).loss          # forward and backward are watched
            loss.backward()
            ...
            if probe.first is not None:       # an ampkit.NumericsFinding
                print(probe.first)
                break

A module is blamed when it turned finite inputs into inf/NaN outputs (forward), or a finite
gradient of its outputs into inf/NaN gradients for its inputs or parameters (backward); the
first such call in execution order is ``probe.first``. The check is one ``aminmax`` per
distinct floating input, output and gradient (min and max propagate NaN and show inf, and give
the ranges), queued on the device without synchronising; the queue is read in one transfer when
``probe.first`` is read, at ``probe.on_step()``, every 4096 checks, and on exit. After the
first finding the hooks do nothing. ``strict=True`` checks each call at once (one host sync per
module call on a GPU) and raises :class:`~ampkit.NonFiniteError` from inside the forward or
backward that produced the value, so a debugger stops right there.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ampkit._tree import floating_tensors
from ampkit.doctor.hooks import observe
from ampkit.doctor.rows import NumericsFinding
from ampkit.errors import ConfigurationError, NonFiniteError

__all__ = ["NonFiniteProbe", "detect_nonfinite"]

_PRECISION = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
_RESOLVE_EVERY = 4096


Ranges = list[tuple[torch.Tensor, torch.Tensor]]


class _RangeCache:
    """``(min, max)`` 0-d tensors per tensor: one ``aminmax`` each, queued without a sync.

    min and max propagate NaN and show -inf/+inf, so they tell finiteness and range at once.
    A tensor seen twice (a module's output is its consumer's input, a container returns its
    last child's output, two hooks get the same gradient) is reduced once: results are cached
    by identity and version counter (autograd accumulates gradients in place), checked through
    a weak reference, so the cache never keeps a tensor alive.
    """

    def __init__(self) -> None:
        self._cache: dict[
            tuple[int, int], tuple[weakref.ref[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
        ] = {}

    def clear(self) -> None:
        self._cache.clear()

    def __call__(self, tensors: list[torch.Tensor]) -> Ranges:
        found: Ranges = []
        for t in tensors:
            if not t.numel():
                continue
            key = (id(t), t._version)
            hit = self._cache.get(key)
            if hit is not None and hit[0]() is t:
                found.append(hit[1])
                continue
            pair = torch.aminmax(t.detach())
            self._cache[key] = (weakref.ref(t), pair)
            found.append(pair)
        return found


@dataclass
class _Event:
    """One watched call (forward) or gradient (backward), judged when resolved.

    It is the origin when ``seen`` holds inf/NaN and ``given`` (the inputs, or the gradient of
    the outputs) does not.
    """

    name: str
    type: str
    phase: str
    step: int
    dtype: torch.dtype | None
    seen: Ranges
    given: Ranges
    source: str  # "outputs", "input gradients", "parameter gradients"
    given_is_batch: bool = False


class _Call:
    """Per forward call: the range of the gradient of its outputs, once autograd computes it."""

    def __init__(self) -> None:
        self.out_grad: Ranges = []


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
        self._first: NumericsFinding | None = None
        self._pending: list[_Event] = []
        self._calls: dict[str, _Call] = {}
        self._minmax = _RangeCache()
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
    def first(self) -> NumericsFinding | None:
        """The first inf/NaN as a :class:`~ampkit.NumericsFinding`, or None while everything is finite.

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
            self._minmax.clear()

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
        kind = type(module).__name__
        dtype = outputs[0].dtype if outputs else None
        self._add(
            _Event(
                name,
                kind,
                "forward",
                self.step,
                dtype,
                self._minmax(outputs),
                self._minmax(inputs),
                "outputs",
                given_is_batch=name == "",
            )
        )
        call = _Call()
        self._calls[name] = call

        def out_grad(grad: torch.Tensor) -> None:
            if self._first is None and self._stack is not None:
                call.out_grad = call.out_grad + self._minmax([grad])

        def made_grad(grad: torch.Tensor) -> None:
            if self._first is None and self._stack is not None:
                self._add(
                    _Event(
                        name,
                        kind,
                        "backward",
                        self.step,
                        grad.dtype,
                        self._minmax([grad]),
                        call.out_grad,
                        "input gradients",
                    )
                )

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
        self._add(
            _Event(
                name,
                type(module).__name__,
                "backward",
                self.step,
                grad.dtype,
                self._minmax([grad]),
                call.out_grad,
                "parameter gradients",
            )
        )

    # -- resolution -------------------------------------------------------------------------

    def _add(self, event: _Event) -> None:
        self._pending.append(event)
        if self.strict:
            self._resolve()
            if self._first is not None:
                raise NonFiniteError(str(self._first), self._first)
        elif len(self._pending) >= _RESOLVE_EVERY:
            self._resolve()

    def _resolve(self) -> None:
        """Judge the pending events in order with one device-to-host transfer."""
        pending, self._pending = self._pending, []
        self._minmax.clear()
        if self._first is not None or not pending:
            return
        scalars = [v for e in pending for pair in (*e.seen, *e.given) for v in pair]
        if not scalars:
            return
        device = scalars[0].device
        values = iter(torch.stack([v.float().to(device) for v in scalars]).tolist())
        for event in pending:
            seen = [(next(values), next(values)) for _ in event.seen]
            given = [(next(values), next(values)) for _ in event.given]
            bad_given = not all(map(_finite_pair, given))
            if not all(map(_finite_pair, seen)) and (event.given_is_batch or not bad_given):
                self._first = self._finding(event, seen, given)
                return

    @staticmethod
    def _finding(
        event: _Event, seen: list[tuple[float, float]], given: list[tuple[float, float]]
    ) -> NumericsFinding:
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
        return NumericsFinding(
            module=event.name,
            kind="non-finite",
            phase=event.phase,  # type: ignore[arg-type]
            precision=_PRECISION.get(event.dtype, dtype) if event.dtype is not None else "",
            message=(
                f"{where} ({event.type}): first inf/NaN of the run, in {event.phase} at step "
                f"{event.step}: {what}; given ranges {ranges}"
            ),
            numbers={
                "min": min((lo for lo, _ in seen), default=math.nan),
                "max": max((hi for _, hi in seen), default=math.nan),
            },
            module_type=event.type,
            step=event.step,
            dtype=dtype,
            input_ranges=tuple(given),
        )


def _finite_pair(pair: tuple[float, float]) -> bool:
    return math.isfinite(pair[0]) and math.isfinite(pair[1])


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
