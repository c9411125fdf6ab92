"""Settings of one ``ampkit train`` run, and the table the command line is made from (no torch
import: ``ampkit train --help`` reads it).

Each :class:`TrainConfig` field is one row of the table: its type and default, and in its
``metadata`` (:func:`setting`) the ``--help`` text, the choices, and what a resume does with
it. ``ampkit train``'s options, the ``--config`` file's keys and their type checks, and the
resume rules (:mod:`ampkit.job.resume`) are all read from here, so a new flag is one field.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import Field, asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from ampkit._validate import is_int, is_number
from ampkit.errors import ConfigurationError

if TYPE_CHECKING:
    from ampkit.precision.modes import ModeOption
    from ampkit.precision.spelling import ParsedPrecision

__all__ = ["LOGGERS", "Setting", "TrainConfig", "setting", "settings", "value_problem"]

#: The experiment trackers ``ampkit train --logger`` can send the logged steps to.
LOGGERS = ("tensorboard", "mlflow", "wandb")

#: The largest ``--seed`` (in absolute value) the samplers can derive their seeds from.
_SEED_MAX = 2**32 - 1

#: What a resume does with a setting: ``compared`` (must equal the checkpoint's), ``free``
#: (may differ), ``carried`` (taken from the checkpoint unless given again), ``applied`` (a new
#: value takes effect from the checkpoint on).
OnResume = Literal["compared", "free", "carried", "applied"]


def setting(
    default: Any,
    help: str,
    *,
    flag: str | None = "",
    choices: tuple[str, ...] | None = None,
    metavar: str | None = None,
    path: Literal["file", "dir"] | None = None,
    show_default: bool | str = True,
    on_resume: OnResume = "compared",
) -> Any:
    """One row of the table: a :class:`TrainConfig` field with its command-line option.

    Args:
        default: the field's default (and the option's).
        help: the option's ``--help`` text (also the field's documentation).
        flag: the option's name; ``""``: ``--`` plus the field's name with dashes; None: no
            option (a key of the ``--config`` file only).
        choices: the values allowed (a ``click.Choice``).
        metavar: how ``--help`` names the value.
        path: the value is a path to a file or to a folder.
        show_default: ``--help`` shows the default (a string: shows that text instead).
        on_resume: what a resume does with it (:data:`OnResume`).

    The options of the precision modes are not written here: each mode declares its own
    (:class:`~ampkit.precision.modes.ModeOption`), and :func:`settings` adds a row for each.
    """
    return field(
        default=default,
        metadata={
            "help": help,
            "flag": flag,
            "choices": choices,
            "metavar": metavar,
            "path": path,
            "show_default": show_default,
            "on_resume": on_resume,
        },
    )


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Settings of one ``ampkit train`` run: one field per setting, each documented by its
    ``help`` (:func:`settings` lists them; it is also the option's ``--help``)."""

    precision: str = setting(
        "auto",
        "auto, fp32, fp16, bf16, fp16-mixed, bf16-mixed, bf16-true (bf16 weights and optimizer "
        "state) or fp8 (fp8-tensorwise, fp8-rowwise, fp8-rowwise-gw-hp; CUDA 8.9+). auto picks "
        "from the hardware (never bf16-true or fp8).",
        on_resume="free",  # compared as resolved (fp32, bf16, fp16), not as spelled
    )
    device: str | None = setting(
        None,
        "cpu, cuda or cuda:N (NVIDIA, or AMD under ROCm), mps, xpu or xpu:N. "
        "[default: the first of cuda, xpu, mps available, else cpu]",
        show_default=False,
        on_resume="free",
    )
    steps: int = setting(300, "Optimizer steps.", on_resume="carried")
    batch_size: int = setting(16, "Sequences per micro-batch.")
    seq_len: int = setting(128, "Tokens (bytes) per sequence.")
    grad_accum: int = setting(1, "Micro-batches per optimizer step.")
    max_grad_norm: float | None = setting(
        1.0, "Clip the unscaled gradient norm to this; 0 disables clipping."
    )
    lr: float = setting(2e-3, "Peak AdamW learning rate.", on_resume="applied")
    warmup_steps: int = setting(
        20,
        "Linear warm-up length in optimizer steps (the scheduler advances only on steps that "
        "really updated the weights).",
    )
    weight_decay: float = setting(0.1, "AdamW decoupled weight decay.")
    seed: int = setting(0, "Seed for weights and batches.")
    model: str = setting(
        "gpt",
        "The model to train, as ampkit bench takes it: gpt (the built-in byte-level GPT, sized "
        "by --n-layer, --n-head, --n-embd), hf:<type>[:tiny] (a Hugging Face model with random "
        "weights, e.g. hf:gpt2:tiny, hf:bert-base-uncased:tiny, hf:vit:tiny), or "
        "package.module:factory.",
        metavar="NAME",
    )
    data: str | None = setting(
        None,
        "What to train on: a UTF-8 text file (or, for an hf: causal or masked LM, a folder of "
        "them), a Hugging Face datasets folder (save_to_disk), or package.module:factory "
        "returning a Dataset. [default: gpt: Python's standard-library sources; other models: "
        "their own synthetic batches]",
        show_default=False,
        on_resume="free",  # compared by content (data_sha256) when recorded
    )
    eval_data: str | None = setting(
        None,
        "Evaluate on this during training, given as --data is (for text: its non-overlapping "
        "--seq-len windows); the mean loss is eval_loss in metrics.jsonl.",
        show_default=False,
        on_resume="free",
    )
    eval_every: int | None = setting(
        None,
        "Steps between evaluations of --eval-data (and the last step). "
        "[default: --checkpoint-every, else --log-every]",
        show_default=False,
        on_resume="free",
    )
    metric: str = setting(
        "loss",
        "What --keep-best ranks the evaluations by: eval loss (lowest best) or top-1 accuracy "
        "(highest best; for classifiers and masked LMs, not causal LMs).",
        choices=("loss", "accuracy"),
        on_resume="free",
    )
    keep_best: bool = setting(
        False,
        "Keep the checkpoint of the best evaluation by --metric besides the newest ones "
        "(OUT/checkpoints; needs --eval-data).",
        on_resume="free",
    )
    patience: int | None = setting(
        None,
        "Stop early after this many evaluations in a row without a new lowest eval loss.",
        show_default=False,
        on_resume="free",
    )
    out: str | None = setting(
        None,
        "Folder for metrics.jsonl, summary.json, model.safetensors and checkpoints/. "
        "[default: a fresh runs/<UTC time>-<model> on the command line; none in Python]",
        path="dir",
        show_default=False,
        on_resume="free",
    )
    save_format: str | None = setting(
        None,
        "How the trained model is written to OUT besides model.safetensors: hf also writes "
        "OUT/hf, a save_pretrained folder (config and fp32 weights) that transformers' "
        "from_pretrained loads. [default: hf for hf: models, else none]",
        choices=("hf", "none"),
        show_default=False,
        on_resume="free",
    )
    log_every: int = setting(10, "Steps between metric rows.", on_resume="carried")
    n_layer: int = setting(2, "Transformer blocks of the GPT.")
    n_head: int = setting(4, "Attention heads.")
    n_embd: int = setting(128, "Width of the GPT (a multiple of --n-head).")
    init_scale: float = setting(
        2.0**16, "The fp16 loss scaler's initial scale (used only for fp16).", flag=None
    )
    growth_interval: int = setting(
        2000,
        "Steps without inf/NaN after which the fp16 loss scale doubles (used only for fp16).",
        flag=None,
    )
    checkpoint_every: int | None = setting(
        None,
        "Write OUT/checkpoints/step-N every N steps (atomic, verified).",
        show_default=False,
        on_resume="carried",
    )
    keep_last: int | None = setting(
        None, "Keep only the newest N checkpoints.", show_default=False, on_resume="carried"
    )
    resume: str | None = setting(
        None,
        "auto: continue from the newest valid checkpoint in OUT/checkpoints (or start fresh "
        "in an empty OUT, or one whose earlier run committed no checkpoint: its metrics.jsonl is "
        "kept as metrics.lost-TIME.jsonl); or a checkpoint folder. Settings must match the "
        "checkpoint's, except --steps, --lr (applied to the schedule) and the logging/checkpoint "
        "flags. Carried over from the checkpoint unless given again: --steps, --log-every, "
        "--checkpoint-every, --keep-last. A run that has done its steps is left as it is "
        "(nothing to do).",
        show_default=False,
        on_resume="free",
    )
    allow_precision_change: bool = setting(
        False,
        "With --resume: accept a checkpoint saved under another precision (e.g. fp16 -> bf16 "
        "after a divergence); weights and optimizer carry over, the loss-scaler state is dropped "
        "and the change is recorded in metrics.jsonl.",
        on_resume="free",
    )
    compile: bool | None = setting(
        None,
        "torch.compile the model. [default: on for fp8 on CUDA, else off]",
        flag="--compile/--no-compile",
        show_default=False,
        on_resume="free",
    )
    compile_mode: str | None = setting(
        None,
        "torch.compile mode (implies --compile); reduce-overhead uses CUDA graphs.",
        choices=("default", "reduce-overhead", "max-autotune"),
        show_default=False,
        on_resume="free",
    )
    strategy: str = setting(
        "auto",
        "Data parallelism under torchrun: DDP, FSDP2 (fully_shard), HSDP (FSDP2 sharded within a "
        "node, replicated across nodes) or none.",
        choices=("auto", "ddp", "fsdp", "hsdp", "none"),
        on_resume="free",
    )
    dist_timeout: float = setting(
        600.0,
        "Seconds a collective waits for the other processes before it fails; also how long a "
        "stopping job waits for its workers' checkpoint.",
        on_resume="free",
    )
    keep_fp32: tuple[str, ...] = setting(
        (),
        "Run this module of the GPT in fp32 under autocast (repeatable), e.g. head.",
        metavar="MODULE",
        show_default=False,
    )
    detect_nonfinite: bool = setting(
        False,
        "Stop at the first inf/NaN and name the module that produced it.",
        on_resume="free",
    )
    overwrite: bool = setting(
        False,
        "Replace an earlier run in OUT (deletes its metrics.jsonl, summary.json, "
        "model.safetensors, checkpoints/ and tensorboard/). Without it a fresh run refuses such "
        "a folder.",
        on_resume="free",
    )
    loggers: tuple[str, ...] = setting(
        (),
        "Also send the logged steps to this tracker (repeatable): tensorboard "
        "(OUT/tensorboard), mlflow (a file store in OUT/mlruns), wandb (offline, in OUT).",
        flag="--logger",
        choices=LOGGERS,
        show_default=False,
        on_resume="free",
    )
    mode_options: dict[str, Any] = field(default_factory=dict)
    """The precision mode's options, by its constructor's keyword (``{<option>: value}``):
    the rows each registered mode declares
    (:func:`~ampkit.precision.modes.cli_options`), a flag each on the command line and a key
    each in ``--config`` and in :meth:`to_dict`. Unset options (None) are left out."""

    def __post_init__(self) -> None:
        if isinstance(self.mode_options, dict):
            set_ = {k: v for k, v in self.mode_options.items() if v is not None}
            object.__setattr__(self, "mode_options", set_)

    def __hash__(self) -> int:
        # the generated hash would fail on the dict of mode options: hash its items instead
        return hash(
            tuple(
                tuple(sorted(self.mode_options.items())) if f.name == "mode_options" else value
                for f in fields(self)
                for value in [getattr(self, f.name)]
            )
        )

    def __getattr__(self, name: str) -> Any:
        """A mode option reads as an attribute (``config.<option>``; None when unset)."""
        if not name.startswith("_") and name in _mode_rows():
            return self.__dict__.get("mode_options", {}).get(name)
        raise AttributeError(f"'TrainConfig' object has no attribute {name!r}")

    @property
    def parsed_precision(self) -> ParsedPrecision:
        """:attr:`precision` read by :func:`~ampkit.parse_precision` once per config: the
        settings check, the policy and the mode of the run all take this one reading.

        Raises:
            ConfigurationError: the precision is not a known spelling.
        """
        cached = self.__dict__.get("_parsed_precision")
        if cached is None or cached.spelled != self.precision:
            from ampkit.precision.spelling import parse_precision

            cached = parse_precision(self.precision)
            object.__setattr__(self, "_parsed_precision", cached)  # frozen: a cache, no field
        return cached

    @classmethod
    def from_settings(cls, values: dict[str, Any]) -> TrainConfig:
        """A config from one value per row of :func:`settings`, by the row's name (the
        command line's options): the mode options' rows go into :attr:`mode_options`."""
        rows = _mode_rows()
        options = dict(values.get("mode_options") or {})
        options.update((k, v) for k, v in values.items() if k in rows and v is not None)
        flat = {k: v for k, v in values.items() if k not in rows and k != "mode_options"}
        return cls(**flat, mode_options=options)

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
        problems += self._mode_option_problems()
        if (self.checkpoint_every or self.resume or self.keep_last) and not self.out:
            problems.append("--checkpoint-every, --keep-last and --resume need --out DIR")
        evaluation = [
            flag
            for flag, set_ in [
                ("--eval-every", self.eval_every is not None),
                ("--keep-best", self.keep_best is True),
                ("--patience", self.patience is not None),
                ("--metric", self.metric != "loss"),
            ]
            if set_
        ]
        if evaluation and not self.eval_data:
            problems.append(f"{', '.join(evaluation)} need --eval-data (what to evaluate on)")
        if self.keep_best is True and not self.out:
            problems.append("--keep-best needs --out DIR (it keeps a checkpoint)")
        if self.overwrite and self.resume:
            problems.append(
                "--overwrite (replace the earlier run) and --resume (continue it) exclude each "
                "other"
            )
        if self.allow_precision_change and not self.resume:
            problems.append("--allow-precision-change applies when resuming: add --resume auto")
        if problems:
            raise ConfigurationError("invalid settings: " + "; ".join(problems) + ".")

    def _mode_option_problems(self) -> list[str]:
        """What is wrong with :attr:`mode_options`: a name no registered mode offers, a value
        of the wrong type, or an option of a mode other than the precision's."""
        if not isinstance(self.mode_options, dict):
            return [f"mode_options must be a dict of options, got {self.mode_options!r}"]
        rows = _mode_rows()
        unknown = sorted(set(self.mode_options) - set(rows))
        if unknown:
            return [
                f"mode_options: {', '.join(map(repr, unknown))} is not an option of a precision "
                f"mode; the modes' options are {', '.join(rows)}"
            ]
        if not self.mode_options:
            return []
        canonical = _canonical_or_none(self)
        problems = []
        for name, value in self.mode_options.items():
            row, owners = rows[name], _owners(name)
            if _wrong(row.type, value):
                problems.append(f"{row.option} must be {_KIND_A[row.type]}, got {value!r}")
            elif canonical not in owners:
                problems.append(
                    f"{row.option} applies to --precision {' or '.join(owners)} only, got "
                    f"--precision {self.precision}"
                )
        return problems

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
            ("metric", self.metric in ("loss", "accuracy"), "loss or accuracy"),
            (
                "dist_timeout",
                is_number(self.dist_timeout) and self.dist_timeout > 0,
                "a positive number of seconds, finite",
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
                for name in ("checkpoint_every", "keep_last", "eval_every", "patience")
            ),
            *(
                (name, isinstance(getattr(self, name), bool), "True or False")
                for name in ("detect_nonfinite", "overwrite", "allow_precision_change", "keep_best")
            ),
            (
                "compile",
                self.compile is None or isinstance(self.compile, bool),
                "True, False or None (on for fp8 on CUDA)",
            ),
            *(
                (name, isinstance(getattr(self, name), str), "a string")
                for name in ("precision", "strategy", "model")
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
                    "save_format",
                    "eval_data",
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

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (recorded in ``summary.json`` and in checkpoints): every
        row of :func:`settings` by name, each mode option among them (None when unset), as
        ``--config`` reads them back."""
        values = asdict(self)
        options = values.pop("mode_options")
        values.update((name, options.get(name)) for name in _mode_rows())
        return values

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each row's default, by name (the command line's defaults come from here)."""
        return {row.name: row.default for row in settings()}


@dataclass(frozen=True)
class Setting:
    """One row of the table, as :func:`settings` reads it from a :class:`TrainConfig` field.

    Attributes:
        name: the field's name (and the ``--config`` key).
        type: the type of one value: ``int``, ``float``, ``str`` or ``bool``.
        default: the default.
        optional: None is allowed (unset).
        many: a tuple of values (a repeatable option, a TOML array).
        help, flag, choices, metavar, path, show_default, on_resume, mode_option,
            unset_means, added_later: as :func:`setting`.
    """

    name: str
    type: type
    default: Any
    optional: bool
    many: bool
    help: str
    flag: str | None
    choices: tuple[str, ...] | None
    metavar: str | None
    path: str | None
    show_default: bool | str
    on_resume: OnResume
    mode_option: bool
    unset_means: Any
    added_later: bool

    @property
    def option(self) -> str | None:
        """The command-line option (``--batch-size``); None for a file-only setting."""
        if self.flag is None:
            return None
        return (self.flag or "--" + self.name.replace("_", "-")).split("/")[0]

    def file_problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` read from a ``--config`` file for this setting
        (:func:`value_problem`); None when it is of the right kind. ``max_grad_norm = 0`` is
        the command line's "no clipping"."""
        return value_problem(self.type, value, many=self.many)


def value_problem(kind: type, value: Any, *, many: bool = False) -> str | None:
    """What is wrong with a TOML ``value`` for a setting whose values are of ``kind``
    (``int``, ``float``, ``str``, ``bool``; ``many``: an array of them), as strictly as the
    command line parses the option: no float or boolean for an integer, no string for a
    number, an array only where the option repeats, no date. None when it is of the right
    kind; ranges and choices are checked later, as for the option."""
    if many:
        if isinstance(value, list) and not any(_wrong(kind, item) for item in value):
            return None
        bad = next((i for i in value if _wrong(kind, i)), None) if isinstance(value, list) else None
        got = _describe(value) if bad is None else f"an array holding {_describe(bad)}"
        return f"expected an array of {_KIND[kind]}s, got {got}"
    if not _wrong(kind, value):
        return None
    return f"expected {_KIND_A[kind]}, got {_describe(value)}"


_KIND = {int: "integer", float: "number", str: "string", bool: "boolean"}
_KIND_A = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _wrong(kind: type, value: Any) -> bool:
    """Whether ``value`` is not one value of ``kind``."""
    if kind is bool:
        return not isinstance(value, bool)
    if kind is int:
        return isinstance(value, bool) or not isinstance(value, int)
    if kind is float:
        return isinstance(value, bool) or not isinstance(value, (int, float))
    return not isinstance(value, str)


def _describe(value: Any) -> str:
    """A TOML value as the message names it (``a float (1.5)``, ``a TOML date (2024-01-01)``)."""
    import datetime

    if isinstance(value, bool):
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, (datetime.date, datetime.time)):
        return f"a TOML date or time ({value.isoformat()})"
    if isinstance(value, list):
        return f"an array ({value!r})"
    kind = {int: "an integer", float: "a float", str: "a string"}.get(type(value), "a table")
    return f"{kind} ({value!r})"


def _row(item: Field[Any], hint: Any) -> Setting:
    args = typing.get_args(hint)
    optional = type(None) in args
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in args if a is not type(None))
    many = typing.get_origin(hint) is tuple
    base = typing.get_args(hint)[0] if many else hint
    meta = item.metadata
    return Setting(
        name=item.name,
        type=base,
        default=item.default,
        optional=optional,
        many=many,
        help=meta["help"],
        flag=meta["flag"],
        choices=meta["choices"],
        metavar=meta["metavar"],
        path=meta["path"],
        show_default=meta["show_default"],
        on_resume=meta["on_resume"],
        mode_option=False,
        unset_means=None,
        added_later=False,
    )


def _owners(name: str) -> tuple[str, ...]:
    """The canonical precisions whose mode offers the option ``name``."""
    from ampkit.precision.modes import cli_options

    return cli_options()[name][1]


def _mode_row(option: ModeOption, owners: tuple[str, ...]) -> Setting:
    """The row of a mode's option: a flag of its name, its help after the precisions it
    applies to, unset (None) by default, which means the mode's own default."""
    shown = "" if option.default is None else f" [default: {option.default}]"
    return Setting(
        name=option.name,
        type=option.type,
        default=None,
        optional=True,
        many=False,
        help=f"{' or '.join(owners)} only: {option.help}{shown}",
        flag="",
        choices=option.choices,
        metavar=option.metavar,
        path=None,
        show_default=False,
        on_resume=option.on_resume,
        mode_option=True,
        unset_means=option.default,
        added_later=option.added_later,
    )


def _mode_rows() -> dict[str, Setting]:
    """The rows of the registered modes' options, by name."""
    from ampkit.precision.modes import cli_options

    return {name: _mode_row(spec, owners) for name, (spec, owners) in cli_options().items()}


def settings() -> tuple[Setting, ...]:
    """The table: one :class:`Setting` per :class:`TrainConfig` field, in field order, then
    one per option of a registered precision mode (:attr:`TrainConfig.mode_options`)."""
    hints = typing.get_type_hints(TrainConfig)
    own = tuple(
        _row(item, hints[item.name]) for item in fields(TrainConfig) if item.name != "mode_options"
    )
    return own + tuple(_mode_rows().values())


def _canonical_or_none(config: TrainConfig) -> str | None:
    """The canonical name of the config's precision; None for ``auto`` and unknown spellings
    (which the precision's own check reports)."""
    try:
        parsed = config.parsed_precision
    except ConfigurationError:
        return None
    return None if parsed.precision == "auto" else parsed.precision


_dataclass_init = TrainConfig.__init__


@functools.wraps(_dataclass_init)
def _init(self: TrainConfig, **values: Any) -> None:
    """The generated ``__init__``, also taking a mode option as a keyword of its own (the
    earlier form, ``TrainConfig(<option>=...)``) with a ``DeprecationWarning`` that shows the
    new one."""
    rows = _mode_rows()
    moved = {name: values.pop(name) for name in list(values) if name in rows}
    moved = {name: value for name, value in moved.items() if value is not None}  # None: unset
    if moved:
        import warnings

        from ampkit._stack import user_stacklevel

        shown = ", ".join(f"{name!r}: ..." for name in moved)
        warnings.warn(
            f"TrainConfig({', '.join(f'{n}=...' for n in moved)}) is deprecated: a precision "
            f"mode's options are one field now. Write TrainConfig(mode_options={{{shown}}}); "
            "the keyword will be removed in the next release.",
            DeprecationWarning,
            stacklevel=user_stacklevel(),
        )
        given = values.get("mode_options")
        values["mode_options"] = {**moved, **(given if isinstance(given, dict) else {})}
    _dataclass_init(self, **values)


setattr(TrainConfig, "__init__", _init)  # noqa: B010 (mypy: a method is not assigned to)


TrainConfig.__doc__ = (TrainConfig.__doc__ or "") + (
    "\n\n    Attributes:\n"
    + "".join(f"        {row.name}: {row.help}\n" for row in settings())
    + "        mode_options: the values of the precision mode's options above (the rows a mode\n"
    + "            declares), by name; each also reads as an attribute (None when unset).\n"
    + "    "
)
