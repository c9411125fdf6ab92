"""What a resumed ``ampkit train`` may change: the settings recorded in a checkpoint, compared
with the command's, and the one change that is applied (``--lr``).

Every checkpoint of ``ampkit train`` records the run's :class:`TrainConfig` (and the SHA-256
of its text) as ``config`` in its manifest. On resume:

* settings that do not change what a step computes may differ freely (:data:`FREE`);
* ``--lr`` may differ and is applied: the scheduler's base learning rate becomes the new one
  and the schedule continues where it was (:func:`override_lr`); the run says so in its notes;
* any other difference is refused before a step is taken, with one line listing them all.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from ampkit._files import json_safe
from ampkit.errors import ConfigurationError
from ampkit.job.config import TrainConfig, settings
from ampkit.precision.spelling import precision_facts

__all__ = [
    "APPLIED",
    "CARRIED",
    "FREE",
    "carry_over",
    "check_resume_config",
    "override_lr",
    "run_record",
]

#: Settings a resumed run may change: where and how often it writes, how long it runs, how
#: the same computation is executed (the table's ``on_resume="free"`` and ``"carried"`` rows).
FREE = frozenset(row.name for row in settings() if row.on_resume in ("free", "carried"))
#: Settings a resumed run may change, applied on resume and reported (``on_resume="applied"``).
APPLIED = frozenset(row.name for row in settings() if row.on_resume == "applied")
#: Settings a resume takes from the checkpoint's record unless given again (the command
#: line's flags; ``on_resume="carried"``): how long the run is and how often it logs and
#: checkpoints, so that ``--resume auto`` alone continues the run as it was started
#: (``--keep-last 2`` included).
CARRIED = tuple(row.name for row in settings() if row.on_resume == "carried")
#: Loss-scaler settings: restored from the checkpoint under fp16, unused otherwise.
_SCALER = frozenset({"init_scale", "growth_interval"})
#: Settings added after checkpoints first recorded theirs, with the value a record without
#: them was trained with: such a record is compared as if it held that value (a bf16 state
#: asked for on the resume of an older checkpoint, whose state is fp32, is refused; the
#: table's ``added_later`` rows).
_ADDED: dict[str, Any] = {row.name: None for row in settings() if row.added_later}
#: What an option left unset means (the table's ``unset_means``: a mode's defaults): unset and
#: the default spelled out are the same run, so a resume may give either.
_DEFAULTS: dict[str, Any] = {r.name: r.unset_means for r in settings() if r.unset_means is not None}


def _effective(name: str, value: Any) -> Any:
    return _DEFAULTS.get(name, value) if value is None else value


def run_record(config: TrainConfig, data_sha256: str) -> dict[str, Any]:
    """The settings recorded in each checkpoint: the config and the text's SHA-256."""
    return {**json_safe(config.to_dict()), "data_sha256": data_sha256}


def carry_over(
    saved: Mapping[str, Any] | None, config: TrainConfig, given: Collection[str] | None
) -> tuple[TrainConfig, list[str]]:
    """``config`` with the :data:`CARRIED` settings not in ``given`` taken from the
    checkpoint's record ``saved``, and a note naming those that changed.

    Args:
        saved: the checkpoint's ``config`` record (None: nothing is carried).
        config: this run's settings.
        given: names of the settings given explicitly (the flags on the command line); None
            takes every setting of ``config`` as given, so nothing is carried.

    Raises:
        ConfigurationError: a carried value is invalid (the record is damaged).
    """
    if saved is None or given is None:
        return config, []
    carried = {
        name: saved[name]
        for name in CARRIED
        if name not in given and name in saved and saved[name] != getattr(config, name)
    }
    if not carried:
        return config, []
    updated = replace(config, **carried)
    updated.validate()
    shown = ", ".join(f"{_flag(name)} {_shown(name, value)}" for name, value in carried.items())
    return updated, [f"carried over from the checkpoint: {shown} (give a flag again to change it)"]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _shown(name: str, value: Any) -> str:
    if name == "max_grad_norm" and value is None:
        return "0"
    if name == "data" and value is None:
        return "(the built-in corpus)"
    if isinstance(value, list):
        return " ".join(str(v) for v in value) or "(none)"
    if value is None:
        return "(none)"
    return str(value)


def check_resume_config(
    saved: Mapping[str, Any] | None,
    config: TrainConfig,
    *,
    data_sha256: str,
    precision: str,
    saved_precision: str | None,
    checkpoint: str,
    world_size: int = 1,
    saved_world_size: int | None = None,
) -> list[str]:
    """Compare the settings recorded in ``checkpoint`` with this run's; return notes.

    Args:
        saved: the checkpoint's ``config`` record (None: an older checkpoint without one).
        config: this run's settings.
        data_sha256: SHA-256 of this run's text.
        precision, saved_precision: the resolved precision now and in the checkpoint.
        checkpoint: the checkpoint's path, for messages.
        world_size, saved_world_size: the processes now and when the checkpoint was
            written; ``batch_size`` (per process) may differ when processes x batch_size x
            grad_accum, the global batch, stays the same (a reshard).

    Raises:
        ConfigurationError: a setting outside :data:`FREE` and :data:`APPLIED` differs; the
            message lists every difference as flags.
    """
    notes: list[str] = []
    differences: list[str] = []
    if saved_precision is not None and saved_precision != precision:
        if config.allow_precision_change:
            notes.append(
                f"--allow-precision-change: resuming the {saved_precision} checkpoint in "
                f"{precision} (weights and optimizer carry over, loss-scaler state dropped)"
            )
        else:
            differences.append(f"--precision {saved_precision} (now {precision})")
    if saved is None:
        notes.append(
            f"{checkpoint} records no settings (written by an older ampkit): only the "
            "precision, model shape and world size were checked"
        )
        return notes
    current = json.loads(json.dumps(json_safe(config.to_dict())))
    uses_scaler = precision_facts(precision).uses_scaler  # a resolved (canonical) name
    resharded = _same_global_batch(saved, current, world_size, saved_world_size)
    if resharded:
        notes.append(resharded)
    for name, now in current.items():
        if name in FREE or name in APPLIED or (name not in saved and name not in _ADDED):
            continue
        if resharded and name == "batch_size":
            continue
        if name in _SCALER and not uses_scaler:
            continue
        before = saved.get(name, _ADDED.get(name))
        if _effective(name, before) != _effective(name, now):
            differences.append(f"{_flag(name)} {_shown(name, before)} (now {_shown(name, now)})")
    recorded = saved.get("data_sha256")
    if recorded is not None and recorded != data_sha256:
        differences.append(
            f"--data {_shown('data', saved.get('data'))} (now {_shown('data', config.data)}, "
            "whose contents differ)"
        )
    if differences:
        raise ConfigurationError(
            f"--resume: {checkpoint} was trained with other settings: "
            f"{', '.join(differences)}. Resume with the settings it was trained with "
            "(--steps, --lr and the logging and checkpoint flags may change), or start a new "
            "run with --overwrite or another --out."
        )
    if "lr" in saved and saved["lr"] != current["lr"]:
        notes.append(
            f"--lr {current['lr']:g} replaces the {saved['lr']:g} the run was started with: "
            "the learning-rate schedule continues from the checkpoint with the new peak"
        )
    return notes


def _same_global_batch(
    saved: Mapping[str, Any], current: Mapping[str, Any], world: int, saved_world: int | None
) -> str | None:
    """The note of a resume that changes the processes and ``batch_size`` but keeps the
    global batch (processes x batch_size x grad_accum), else None."""
    before, now = saved.get("batch_size"), current["batch_size"]
    accum = current["grad_accum"]
    if not isinstance(saved_world, int) or not isinstance(before, int) or before == now:
        return None
    if saved.get("grad_accum", accum) != accum or saved_world * before != world * now:
        return None
    return (
        f"--batch-size {now} on {world} process(es) (was {before} on {saved_world}): the "
        f"global batch stays {world * now * accum} samples per step"
    )


def override_lr(optimizer: Any, scheduler: Any, lr: float) -> None:
    """Make ``lr`` the base learning rate of every parameter group, keeping the schedule's
    current factor (``lr_now / base_lr``), so the schedule continues with the new peak."""
    bases = list(getattr(scheduler, "base_lrs", None) or [g["lr"] for g in optimizer.param_groups])
    for i, group in enumerate(optimizer.param_groups):
        factor = group["lr"] / bases[i] if bases[i] else 1.0
        group["initial_lr"] = lr
        group["lr"] = lr * factor
    if scheduler is not None and hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [lr] * len(optimizer.param_groups)
