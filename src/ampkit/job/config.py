"""Settings of one ``ampkit train`` run (no torch import: the command line reads its defaults)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ampkit._validate import is_int, is_number
from ampkit.errors import ConfigurationError

__all__ = ["LOGGERS", "TrainConfig"]

#: The experiment trackers ``ampkit train --logger`` can send the logged steps to.
LOGGERS = ("tensorboard", "mlflow", "wandb")

#: The largest ``--seed`` (in absolute value) the samplers can derive their seeds from.
_SEED_MAX = 2**32 - 1


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Settings of one ``ampkit train`` run. Field docs say where each takes effect.

    Attributes:
        precision: ``auto``/``fp32``/``fp16``/``bf16`` (or alias); resolved once, at start.
        device: ``cpu``, ``cuda``, ``cuda:N``; None picks CUDA when available.
        steps: optimizer steps to run (each is ``grad_accum`` micro-batches).
        batch_size: sequences per micro-batch (per process).
        seq_len: tokens per sequence; also the model's context length.
        grad_accum: micro-batches accumulated per optimizer step.
        max_grad_norm: clip the unscaled gradient norm to this; None disables clipping.
        lr: peak AdamW learning rate, reached after ``warmup_steps`` linear warm-up steps.
        warmup_steps: linear warm-up length in optimizer steps (the scheduler advances only
            on steps that really updated the weights).
        weight_decay: AdamW decoupled weight decay.
        seed: seeds the model initialisation and the batch sampler.
        data: a UTF-8 text file to train on; None uses the built-in standard-library corpus.
        out: folder for ``metrics.jsonl``, ``summary.json`` and ``model.safetensors``.
        log_every: write a metrics row (and sync the GPU once) every this many steps.
        n_layer, n_head, n_embd: shape of the built-in GPT.
        init_scale, growth_interval: loss-scaler settings, used only for fp16.
        checkpoint_every: write ``out/checkpoints/step-N`` every N steps (needs ``out``).
        keep_last: keep only the newest N checkpoints.
        resume: ``auto`` (newest valid checkpoint in ``out/checkpoints``) or a checkpoint path;
            the settings recorded in the checkpoint are compared with these before any step.
        overwrite: replace an earlier run's outputs in ``out`` (otherwise a fresh run refuses
            a folder that holds them).
        allow_precision_change: resume a checkpoint saved under another precision on purpose
            (fp16 -> bf16): weights and optimizer carry over, the loss-scaler state is dropped.
        compile: ``torch.compile`` the model; None: on for fp8 on CUDA, else off.
        compile_mode: ``torch.compile`` mode (``reduce-overhead``: CUDA graphs).
        strategy: ``auto`` (DDP under torchrun), ``ddp``, ``fsdp``, ``hsdp`` or ``none``.
        dist_timeout: seconds a collective waits for the other processes before it fails
            (and that a stopping ``--nproc`` job waits for its workers' checkpoint).
        keep_fp32: module names of the GPT to run in fp32 under autocast.
        detect_nonfinite: stop at the first inf/NaN and name the module that made it.
        update_compensation: bf16-true only: ``kahan`` (default), ``stochastic`` or ``none``.
        state_precision: bf16-true only: the optimizer state of the bf16 parameters in
            ``fp32`` (default), ``bf16-stochastic``, ``bf16-kahan`` or ``bf16``; recorded in
            the checkpoint (a resume with another one is refused).
        loggers: experiment trackers that get every logged step besides ``metrics.jsonl``:
            ``tensorboard`` (under ``out/tensorboard``; also on by itself when installed and
            ``out`` is set), ``mlflow`` (a file store under ``out/mlruns``, or MLflow's own
            setting without ``out``), ``wandb`` (offline, under ``out``).
    """

    precision: str = "auto"
    device: str | None = None
    steps: int = 300
    batch_size: int = 16
    seq_len: int = 128
    grad_accum: int = 1
    max_grad_norm: float | None = 1.0
    lr: float = 2e-3
    warmup_steps: int = 20
    weight_decay: float = 0.1
    seed: int = 0
    data: str | None = None
    out: str | None = None
    log_every: int = 10
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    init_scale: float = 2.0**16
    growth_interval: int = 2000
    checkpoint_every: int | None = None
    keep_last: int | None = None
    resume: str | None = None
    allow_precision_change: bool = False
    compile: bool | None = None
    compile_mode: str | None = None
    strategy: str = "auto"
    dist_timeout: float = 600.0
    keep_fp32: tuple[str, ...] = ()
    detect_nonfinite: bool = False
    overwrite: bool = False
    update_compensation: str | None = None
    state_precision: str | None = None
    loggers: tuple[str, ...] = ()

    def validate(self) -> None:
        """Raise one :class:`ConfigurationError` listing every invalid setting.

        Types are checked too (``steps=True`` or ``lr="1"`` is refused, not coerced). Flags
        are named as on the command line (``--steps``), since that is where users meet them.
        """
        problems = [
            f"--{name.replace('_', '-')} must be {rule}, got {getattr(self, name)!r}"
            for name, ok, rule in self._checks()
            if not ok
        ]
        for name in _MODE_OPTIONS:
            if getattr(self, name) is not None and not _takes(self.precision, name):
                problems.append(
                    f"--{name.replace('_', '-')} applies to --precision bf16-true only, got "
                    f"--precision {self.precision}"
                )
        if (self.checkpoint_every or self.resume or self.keep_last) and not self.out:
            problems.append("--checkpoint-every, --keep-last and --resume need --out DIR")
        if self.overwrite and self.resume:
            problems.append(
                "--overwrite (replace the earlier run) and --resume (continue it) exclude each "
                "other"
            )
        if self.allow_precision_change and not self.resume:
            problems.append("--allow-precision-change applies when resuming: add --resume auto")
        if problems:
            raise ConfigurationError("invalid settings: " + "; ".join(problems) + ".")

    def _checks(self) -> list[tuple[str, bool, str]]:
        """``(field, valid, rule)`` for every field."""
        ints = {
            name: is_int(getattr(self, name), low)
            for name, low in [
                ("steps", 1),
                ("batch_size", 1),
                ("seq_len", 1),
                ("grad_accum", 1),
                ("warmup_steps", 0),
                ("log_every", 1),
                ("n_layer", 1),
                ("n_head", 1),
                ("growth_interval", 1),
            ]
        }
        checks = [
            (name, ok, f"an integer >= {0 if name == 'warmup_steps' else 1}")
            for name, ok in ints.items()
        ]
        heads = self.n_head if ints["n_head"] else 1
        checks += [
            ("lr", is_number(self.lr) and self.lr > 0, "a positive number"),
            (
                "dist_timeout",
                is_number(self.dist_timeout) and self.dist_timeout > 0,
                "a positive number of seconds",
            ),
            ("init_scale", is_number(self.init_scale) and self.init_scale > 0, "a positive number"),
            (
                "weight_decay",
                is_number(self.weight_decay) and self.weight_decay >= 0,
                "a number >= 0",
            ),
            (
                "max_grad_norm",
                self.max_grad_norm is None
                or (is_number(self.max_grad_norm) and self.max_grad_norm > 0),
                "a positive number (0 on the command line disables clipping)",
            ),
            (
                "n_embd",
                is_int(self.n_embd, 1) and self.n_embd % heads == 0,
                f"a positive multiple of --n-head ({self.n_head})",
            ),
            (
                "seed",
                is_int(self.seed, -_SEED_MAX) and self.seed <= _SEED_MAX,
                f"an integer from -{_SEED_MAX} to {_SEED_MAX}",
            ),
            *(
                (
                    name,
                    getattr(self, name) is None or is_int(getattr(self, name), 1),
                    "an integer >= 1",
                )
                for name in ("checkpoint_every", "keep_last")
            ),
            *(
                (name, isinstance(getattr(self, name), bool), "True or False")
                for name in ("detect_nonfinite", "overwrite", "allow_precision_change")
            ),
            (
                "compile",
                self.compile is None or isinstance(self.compile, bool),
                "True, False or None (on for fp8 on CUDA)",
            ),
            *(
                (name, isinstance(getattr(self, name), str), "a string")
                for name in ("precision", "strategy")
            ),
            *(
                (
                    name,
                    getattr(self, name) is None or isinstance(getattr(self, name), str),
                    "a string",
                )
                for name in (
                    "device",
                    "data",
                    "out",
                    "resume",
                    "compile_mode",
                    "update_compensation",
                    "state_precision",
                )
            ),
            (
                "keep_fp32",
                isinstance(self.keep_fp32, (tuple, list))
                and all(isinstance(m, str) for m in self.keep_fp32),
                "module names",
            ),
            (
                "loggers",
                isinstance(self.loggers, (tuple, list))
                and all(name in LOGGERS for name in self.loggers),
                f"names from {', '.join(LOGGERS)}",
            ),
        ]
        return checks

    def mode_options(self) -> dict[str, Any]:
        """The options of the precision mode that were set (constructor keywords of the mode,
        e.g. ``Bf16True(state_precision=...)``)."""
        return {name: getattr(self, name) for name in _MODE_OPTIONS if getattr(self, name)}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (recorded in ``summary.json`` and in checkpoints)."""
        return asdict(self)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each field's default, by name (the command line's defaults come from here)."""
        return {f.name: f.default for f in fields(cls)}


#: Fields that are options of a precision mode (the mode's constructor keyword of that name).
_MODE_OPTIONS = ("update_compensation", "state_precision")


def _takes(precision: str, option: str) -> bool:
    """Whether the precision mode of ``precision`` (a spelling) takes ``option`` (False for
    ``auto`` and unknown spellings, which the precision's own check reports)."""
    from ampkit.precision.modes import MODES, mode_options
    from ampkit.precision.policy import parse_precision

    try:
        mode = MODES.get(parse_precision(precision).precision)
    except ConfigurationError:
        return False
    return mode is not None and option in mode_options(mode)
