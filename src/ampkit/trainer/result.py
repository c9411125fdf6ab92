"""What ``Trainer.fit`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ampkit.precision.modes import check_declared, declared_value
from ampkit.trainer.evaluation import EvalResult

__all__ = ["FitResult"]


@dataclass(frozen=True)
class FitResult:
    """What ``Trainer.fit`` did (rank 0's view; counters are identical on all ranks).

    Attributes:
        precision, reason: the precision trained in and why it was chosen.
        device: the training device of this process.
        world_size: processes that trained together.
        steps, skipped_steps: optimizer steps taken in total (a resumed run counts the steps
            before the resume too) and how many of them were skipped for inf/NaN gradients.
        final_loss: mean training loss of the last logged interval.
        samples_per_s, tokens_per_s: throughput of this ``fit`` call over all ranks
            (``tokens_per_s`` when the Trainer knows ``tokens_per_sample``).
        wall_s: wall time of the training loop.
        peak_memory_bytes, peak_memory_kind: the peak memory and what was measured.
        resumed_from: the checkpoint the run resumed from, if any.
        final_scale: the loss scale after the last step (1.0 without loss scaling).
        checkpoints: checkpoints written by this call.
        notes: what the run decided on its own (resume, skipped bad checkpoints, ...).
        scale_history: ``(step, scale)`` at each change of loss scale.
        eval_history: every evaluation of ``EvalConfig`` this call ran, in order (step, mean
            loss, each metric's value; :class:`~ampkit.trainer.evaluation.EvalResult`);
            empty without ``eval=``. A resumed run lists the evaluations after the resume.
        mode_fields: what the precision mode reports about the run, by the names its class
            declares (``PrecisionMode.result_field_specs``; bf16-true: how it kept small
            updates and the share it lost). Each declared name is also an attribute of the
            result, None when the run's mode did not set it.
        dtype_contract: what the run really trained in, read at set-up
            (:meth:`~ampkit.precision.contract.DtypeContract.to_dict`: ``kind``, weight,
            gradient and optimizer-state dtypes per param group, master copy, autocast).
    """

    precision: str
    reason: str
    device: str
    world_size: int
    steps: int
    skipped_steps: int
    final_loss: float
    samples_per_s: float
    tokens_per_s: float | None
    wall_s: float
    peak_memory_bytes: int
    peak_memory_kind: str
    resumed_from: str | None
    final_scale: float
    checkpoints: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    scale_history: list[tuple[int, float]] = field(default_factory=list)
    eval_history: list[EvalResult] = field(default_factory=list)
    mode_fields: dict[str, Any] = field(default_factory=dict)
    dtype_contract: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        check_declared(self, self.mode_fields, "result")

    def __getattr__(self, name: str) -> Any:
        return declared_value(self, self.__dict__.get("mode_fields", {}), name, "result")

    @property
    def last_eval(self) -> EvalResult | None:
        """The last evaluation of this call (that of the last step), or None."""
        return self.eval_history[-1] if self.eval_history else None
