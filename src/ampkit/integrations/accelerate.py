"""Accelerate: ampkit's loss-scale telemetry for an ``accelerate.Accelerator``.

::

    accelerator = accelerate.Accelerator(mixed_precision="fp16")
    telemetry = AcceleratorTelemetry(accelerator)     # warns if fp16 does not really run
    for batch in loader:
        ...
        accelerator.backward(loss)
        optimizer.step()
        telemetry.after_step()                        # counts a skipped step; no device sync
        if step % 100 == 0:
            print(telemetry.stats)                    # an ampkit.ScalerStats (one scale read)

Accelerate keeps its fp16 ``torch.amp.GradScaler`` in ``accelerator.scaler`` and knows after
each ``optimizer.step()`` whether the step was skipped
(``accelerator.optimizer_step_was_skipped``, a host value); it keeps no count and no history.
:class:`AcceleratorTelemetry` keeps them, in ampkit's :class:`~ampkit.ScalerStats`.

Accelerate 1.15 with ``mixed_precision="fp16"`` on a CPU makes no scaler and no autocast and
says nothing: the run is fp32. :class:`AcceleratorTelemetry` warns about that
(:class:`~ampkit.PrecisionWarning`); train with ampkit's :class:`~ampkit.MixedPrecision` for
honest fp16 on a CPU, or ask Accelerate for bf16 there.
"""

from __future__ import annotations

import warnings
from collections import deque
from typing import Any

from ampkit.errors import ConfigurationError, PrecisionWarning
from ampkit.precision.scaler import ScalerStats

__all__ = ["AcceleratorTelemetry"]


class AcceleratorTelemetry:
    """Skipped steps and loss scale of an ``accelerate.Accelerator``'s fp16 training.

    Args:
        accelerator: the ``accelerate.Accelerator``.
        history_size: how many scale changes :attr:`stats` remembers.

    Raises:
        ConfigurationError: ``accelerator`` has no ``mixed_precision``/``scaler`` (not an
            Accelerator).

    Warns:
        PrecisionWarning: fp16 was asked for but Accelerate made no loss scaler (it runs fp32
            without autocast, as on a CPU).
    """

    def __init__(self, accelerator: Any, *, history_size: int = 1024) -> None:
        if not hasattr(accelerator, "mixed_precision") or not hasattr(accelerator, "scaler"):
            raise ConfigurationError(
                f"AcceleratorTelemetry: accelerator is a {type(accelerator).__name__}, not an "
                "accelerate.Accelerator. Pass the Accelerator that trains the model."
            )
        self.accelerator = accelerator
        self.steps = 0
        self.skipped_steps = 0
        self.consecutive_skips = 0
        self._history: deque[tuple[int, float]] = deque(maxlen=history_size)
        self._last_scale: float | None = None
        if str(accelerator.mixed_precision) == "fp16" and accelerator.scaler is None:
            device = getattr(accelerator, "device", "this device")
            warnings.warn(
                f"AcceleratorTelemetry: the Accelerator was asked for mixed_precision='fp16' "
                f"but made no loss scaler on {device}: it runs in fp32 without autocast, and "
                "says nothing. Ask for bf16 there, or train fp16 with ampkit.MixedPrecision "
                "(honest, emulated fp16 on a CPU).",
                PrecisionWarning,
                stacklevel=2,
            )

    @property
    def scaler(self) -> Any:
        """Accelerate's ``torch.amp.GradScaler``, or None without fp16 loss scaling."""
        return self.accelerator.scaler

    def after_step(self) -> bool:
        """Count the optimizer step just taken; return whether it was skipped.

        Call it after ``optimizer.step()`` on every iteration; iterations that only accumulate
        gradients (``accelerator.sync_gradients`` is False) are not steps and are ignored.
        Reads a host flag Accelerate already holds: no device sync.
        """
        if not getattr(self.accelerator, "sync_gradients", True):
            return False
        skipped = bool(self.accelerator.optimizer_step_was_skipped)
        self.steps += 1
        self.skipped_steps += skipped
        self.consecutive_skips = self.consecutive_skips + 1 if skipped else 0
        return skipped

    @property
    def stats(self) -> ScalerStats:
        """Telemetry as :class:`~ampkit.ScalerStats`; reads the scale once (one device sync
        on a GPU: read it at log steps, not every step)."""
        scaler = self.scaler
        scale = float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else 1.0
        if scale != self._last_scale:
            self._history.append((self.steps, scale))
            self._last_scale = scale
        return ScalerStats(
            steps=self.steps,
            skipped_steps=self.skipped_steps,
            scale=scale,
            consecutive_skips=self.consecutive_skips,
            scale_history=tuple(self._history),
        )
