"""``Bf16True``: pure bf16 training (bf16 weights and gradients, the optimizer state in fp32
or bf16 as ``state_precision`` says), with compensated updates so that small updates are not
rounded away.

The mode casts the model (:func:`~ampkit.precision.bf16_true.to_bf16_true`), wraps the
optimizer (:class:`~ampkit.precision.bf16_true.CompensatedOptimizer`), measures the share of
lost updates on logged steps (``lost_updates`` for the weights and ``lost_state_updates`` for
the optimizer state in the metrics, the weights' in the run summary, a warning once when
either is alarming) and adds the lost-updates probe to ``ampkit doctor``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ampkit._stack import user_stacklevel
from ampkit._validate import is_number
from ampkit.errors import ConfigurationError, PrecisionWarning
from ampkit.precision.modes.base import (
    DoctorSection,
    ModeField,
    ModeOption,
    PrecisionMode,
    TrainingSetup,
)
from ampkit.precision.spelling import ParsedPrecision, PrecisionFacts

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["Bf16True"]

#: The default of ``warn_lost_above``: the share of a step's updates rounded away above which a
#: run warns (:data:`ampkit.precision.bf16_true.LOST_UPDATES_WARN_AT`, held equal by a test;
#: written here so that reading the mode's defaults imports no torch).
LOST_UPDATES_WARN_AT = 0.1

#: How bf16-true keeps small weight updates, in the run summary's words.
_COMPENSATION = {
    "kahan": "Kahan-compensated",
    "stochastic": "stochastic rounding",
    "none": "no compensation",
}
#: How bf16-true stores the optimizer state, in the run summary's words.
_STATE = {
    "fp32": "fp32",
    "bf16-stochastic": "bf16, stochastic rounding",
    "bf16-kahan": "bf16, Kahan-compensated",
    "bf16": "bf16, round to nearest",
}


class Bf16True(PrecisionMode):
    """bf16 weights and gradients, fp32 (or bf16) optimizer state; bf16 autocast.

    Args:
        update_compensation: ``"kahan"`` (default: a bf16 residual per weight keeps what
            rounding dropped), ``"stochastic"`` (stochastic rounding) or ``"none"`` (warns:
            small updates are lost).
        keep_fp32: module names or types :meth:`prepare_model` keeps in fp32; None keeps
            embeddings, norms and the final projection. The run's fp32 islands
            (``keep_fp32`` of the Trainer) are kept in fp32 too.
        state_precision: how the optimizer state of the bf16 parameters is stored:
            ``"fp32"`` (default: exact; AdamW 8 B per parameter), ``"bf16-stochastic"``
            (stochastic rounding, unbiased; 4 B), ``"bf16-kahan"`` (bf16 plus a bf16 residual;
            8 B) or ``"bf16"`` (round to nearest; warns: AdamW's second moment drifts up).
        warn_lost_above: the share of a logged step's intended weight (or state) updates
            rounded away above which the run warns, once; default
            :data:`~ampkit.precision.bf16_true.LOST_UPDATES_WARN_AT` (0.1). Stochastic rounding
            never warns (its rounded-away updates are kept in expectation).

    ``ampkit train`` offers ``update_compensation``, ``state_precision`` and
    ``warn_lost_above`` as flags (:attr:`cli_options`).

    Example::

        Trainer(model, opt, max_steps=10, precision=ampkit.Bf16True(update_compensation="stochastic"))

    Raises:
        ConfigurationError: an unknown ``update_compensation`` or ``state_precision``, or a
            ``warn_lost_above`` outside [0, 1].

    Warns:
        PrecisionWarning: ``update_compensation="none"`` or ``state_precision="bf16"``.
    """

    precision_facts: ClassVar[tuple[PrecisionFacts, ...]] = (
        # parameters, gradients and optimizer state in bf16 too, so no loss scaling
        PrecisionFacts("bf16-true", compute_dtype="bfloat16", param_dtype="bfloat16"),
    )
    cli_options: ClassVar[tuple[ModeOption, ...]] = (
        ModeOption(
            "update_compensation",
            str,
            "Kahan-compensated or stochastically rounded weight updates, or none (warns: small "
            "updates are lost).",
            default="kahan",
            choices=tuple(_COMPENSATION),
        ),
        ModeOption(
            "state_precision",
            str,
            "keep the optimizer state of the bf16 weights in fp32, in bf16 with stochastic "
            "rounding, in bf16 with a Kahan residual, or in plain bf16 (warns: AdamW's second "
            "moment drifts up). Fixed for the run: a resume must keep it.",
            default="fp32",
            choices=tuple(_STATE),
            added_later=True,
        ),
        ModeOption(
            "warn_lost_above",
            float,
            "warn once when more than this share (0 to 1) of a logged step's weight or "
            "optimizer-state updates was rounded away (stochastic rounding never warns). May "
            "change on resume.",
            default=LOST_UPDATES_WARN_AT,
            on_resume="free",
            metavar="SHARE",
        ),
    )
    options: ClassVar[Mapping[str, str]] = {
        "update_compensation": "update_compensation",
        "bf16_true_keep_fp32": "keep_fp32",
        "bf16_true_state_precision": "state_precision",
    }
    metric_fields: ClassVar[tuple[ModeField, ...]] = (
        ModeField(
            "lost_updates",
            float,
            "share of the step's intended weight updates the bf16 weights did not store",
        ),
        ModeField(
            "lost_state_updates",
            float,
            "the same share for the optimizer state of the bf16 parameters (0.0 under fp32 state)",
        ),
    )
    result_field_specs: ClassVar[tuple[ModeField, ...]] = (
        ModeField(
            "update_compensation",
            str,
            "how small weight updates are kept: kahan, stochastic or none",
        ),
        ModeField("lost_updates", float, "lost_updates of the last logged step"),
        ModeField(
            "state_precision",
            str,
            "how the optimizer state of the bf16 parameters is stored: fp32, bf16-stochastic, "
            "bf16-kahan or bf16",
        ),
        ModeField("lost_state_updates", float, "lost_state_updates of the last logged step"),
    )

    def __init__(
        self,
        *,
        update_compensation: str | None = None,
        keep_fp32: Sequence[str | type[nn.Module]] | None = None,
        state_precision: str | None = None,
        warn_lost_above: float = LOST_UPDATES_WARN_AT,
    ) -> None:
        super().__init__(ParsedPrecision("bf16-true", "bf16-true"))  # its own name: no parse
        if not is_number(warn_lost_above, 0.0, 1.0):
            raise ConfigurationError(
                f"warn_lost_above: {warn_lost_above!r} is invalid. Use a share from 0 to 1 "
                f"(default {LOST_UPDATES_WARN_AT}: warn when more than 10% of a step's updates "
                "are rounded away).",
                argument="warn_lost_above",
            )
        self.warn_lost_above = float(warn_lost_above)
        from ampkit.precision.bf16_true.compensated import (
            check_compensation,
            check_state_precision,
        )

        if update_compensation is not None:
            check_compensation(update_compensation)
        if state_precision is not None:
            check_state_precision(state_precision)
        if state_precision == "bf16":
            warnings.warn(
                "state_precision='bf16' under bf16-true: the optimizer state is rounded to "
                "nearest bf16 every step, and an EMA such as AdamW's second moment "
                "(beta2=0.999: 0.1% of its value per step, under half a bf16 ulp) keeps only "
                "its large increases (measured: 1.3x to 3.5x the exact EMA after 2,000 steps). Use "
                "'fp32' (the default) or 'bf16-stochastic'.",
                PrecisionWarning,
                stacklevel=user_stacklevel(),
            )
        if update_compensation == "none":
            warnings.warn(
                "update_compensation='none' under bf16-true: with bf16 weights and "
                "round-to-nearest, every update smaller than half an ulp of its weight is "
                "lost (a weight of magnitude 1 ignores updates below 0.002, step after step). "
                "Use 'kahan' (the default) or 'stochastic'.",
                PrecisionWarning,
                stacklevel=user_stacklevel(),
            )
        self.update_compensation: str = update_compensation or "kahan"
        self.keep_fp32 = keep_fp32
        self.state_precision: str = state_precision or "fp32"
        self._lost_state: float | None = None
        self._warned_state = False
        self._islands: tuple[str, ...] = ()
        self._lost: float | None = None  # the share at the last logged step
        self._warned = False

    @classmethod
    def from_parsed(cls, parsed: ParsedPrecision, options: Mapping[str, Any]) -> PrecisionMode:
        return cls(**options)

    def __repr__(self) -> str:
        return (
            f"Bf16True(update_compensation={self.update_compensation!r}, "
            f"state_precision={self.state_precision!r})"
        )

    def setup_training(self, setup: TrainingSetup) -> list[str]:
        """The run's fp32 islands keep fp32 parameters too (an island of bf16 weights would
        meet fp32 inputs)."""
        self._islands = tuple(setup.keep_fp32)
        return []

    def kept_fp32(self, model: nn.Module) -> list[str | type[nn.Module]]:
        """What :meth:`prepare_model` keeps in fp32: ``keep_fp32`` (or its defaults), then the
        run's fp32 islands."""
        from ampkit.precision.bf16_true.casting import default_keep_fp32

        base: list[str | type[nn.Module]] = (
            list(default_keep_fp32(model)) if self.keep_fp32 is None else list(self.keep_fp32)
        )
        return [*base, *(n for n in self._islands if n not in base)]

    def prepare_model(self, model: nn.Module) -> nn.Module:
        """Cast parameters and buffers to bf16, keeping :meth:`kept_fp32` in fp32.

        Raises:
            ConfigurationError: a name in ``keep_fp32`` is not a module of ``model``.
        """
        from ampkit.precision.bf16_true.casting import to_bf16_true

        keep = self.keep_fp32 if not self._islands else self.kept_fp32(model)
        to_bf16_true(model, keep)
        return model

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Wrap ``optimizer`` in a :class:`CompensatedOptimizer` (once).

        Raises:
            ConfigurationError: ``optimizer`` is not a ``torch.optim.Optimizer``.
        """
        from ampkit.precision.bf16_true.compensated import CompensatedOptimizer

        if isinstance(optimizer, CompensatedOptimizer):
            return optimizer
        return CompensatedOptimizer(
            optimizer,
            self.update_compensation,  # type: ignore[arg-type]
            state_precision=self.state_precision,  # type: ignore[arg-type]
        )

    def measure_next_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Count the lost updates of the next step (read by :meth:`step_metrics`)."""
        from ampkit.precision.bf16_true.compensated import CompensatedOptimizer

        if isinstance(optimizer, CompensatedOptimizer):
            optimizer.measure_next_step()

    def step_metrics(
        self, optimizer: torch.optim.Optimizer, *, step: int, names: Mapping[int, str]
    ) -> dict[str, Any]:
        """``lost_updates``: the share of the step's intended weight updates the bf16 weights
        rounded away; ``lost_state_updates``: the same for the optimizer state of the bf16
        parameters (0.0 under fp32 state). Nothing when the step was not measured.

        Warns:
            PrecisionWarning: once per run for the weights and once for the state, when more
                than ``warn_lost_above`` were lost.
        """
        from ampkit.precision.bf16_true.compensated import CompensatedOptimizer

        lost = (
            optimizer.lost_updates(dict(names))
            if isinstance(optimizer, CompensatedOptimizer)
            else None
        )
        self._lost = None if lost is None else lost.fraction
        self._lost_state = None if lost is None else lost.state_fraction
        if lost is None:
            return {}
        if (
            not self._warned
            and lost.compensation != "stochastic"
            and lost.fraction > self.warn_lost_above
        ):
            self._warned = True
            worst = sorted(lost.per_tensor.items(), key=lambda kv: -kv[1])[:3]
            warnings.warn(
                f"Trainer: at step {step}, {100 * lost.fraction:.1f}% of the intended "
                f"weight updates were rounded away by the bf16 weights (update_compensation="
                f"{lost.compensation!r}; worst: "
                + ", ".join(f"{n} {100 * v:.0f}%" for n, v in worst)
                + "). Use update_compensation='kahan' or 'stochastic', or keep these modules in "
                f"fp32 (Bf16True(keep_fp32=[...])); this warns above warn_lost_above="
                f"{self.warn_lost_above}.",
                PrecisionWarning,
                stacklevel=user_stacklevel(),
            )
        if (
            not self._warned_state
            and lost.state_precision == "bf16"
            and lost.state_fraction > self.warn_lost_above
        ):
            self._warned_state = True
            worst = sorted(lost.state_per_tensor.items(), key=lambda kv: -kv[1])[:3]
            warnings.warn(
                f"Trainer: at step {step}, {100 * lost.state_fraction:.1f}% of the intended "
                "optimizer-state updates were rounded away by bf16 state (state_precision="
                "'bf16'; worst: "
                + ", ".join(f"{n} {100 * v:.0f}%" for n, v in worst)
                + "). Use Bf16True(state_precision='fp32') or 'bf16-stochastic'.",
                PrecisionWarning,
                stacklevel=user_stacklevel(),
            )
        return {"lost_updates": lost.fraction, "lost_state_updates": lost.state_fraction}

    def result_fields(self) -> dict[str, Any]:
        """``update_compensation``, ``state_precision`` and the ``lost_updates`` and
        ``lost_state_updates`` of the last logged step."""
        return {
            "update_compensation": self.update_compensation,
            "lost_updates": self._lost,
            "state_precision": self.state_precision,
            "lost_state_updates": self._lost_state,
        }

    @classmethod
    def summary_rows(cls, fields: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``updates`` (the compensation and the last logged share of lost weight updates)
        and ``state`` (how the optimizer state is stored, and its lost share unless fp32)."""
        rows = []
        compensation = fields.get("update_compensation")
        if compensation is not None:
            how = _COMPENSATION.get(compensation, compensation)
            lost = fields.get("lost_updates")
            if lost is not None:
                how += f"; {lost:.2%} of the last logged step's updates rounded away"
            rows.append(("updates", f"bf16 weights, {how}"))
        state = fields.get("state_precision")
        if state is not None:
            kept = _STATE.get(state, state)
            if kept != state:
                kept += f" ({state})"
            lost_state = fields.get("lost_state_updates")
            if lost_state is not None and state != "fp32":
                kept += f"; {lost_state:.2%} of the last logged step's state updates rounded away"
            rows.append(("state", f"optimizer state in {kept}"))
        return rows

    def doctor_sections(
        self,
        model: nn.Module,
        closure: Callable[[], torch.Tensor],
        *,
        steps: int,
        lr: float,
    ) -> list[DoctorSection]:
        """``lost_updates``: the probe of ``steps`` AdamW steps at ``lr`` per compensation
        (:func:`~ampkit.precision.bf16_true.probe.probe_lost_updates`)."""
        from ampkit.precision.bf16_true.probe import probe_lost_updates

        probe = probe_lost_updates(model, closure, steps=steps, lr=lr, keep_fp32=self.keep_fp32)
        return [DoctorSection("lost_updates", probe.to_text(), probe.to_dict())]
