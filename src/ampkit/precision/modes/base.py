"""``PrecisionMode``: what one precision does to a training run, as a small set of hooks.

The engine (:class:`~ampkit.MixedPrecision`), the Trainer, bench and the doctor call these hooks
and never ask which precision they run: a mode is one subclass in one file, registered in
:mod:`ampkit.precision.modes`. In order of a run::

    policy = mode.resolve(device)          # the hardware rules (or a Policy given by the user)
    mode.bind(policy)                      # from now on mode.policy is the run's policy
    compile = mode.compile_default(compile)
    notes = mode.setup_training(setup)     # from the first batch, before prepare_model
    model = mode.prepare_model(model)      # before DDP/FSDP and torch.compile
    optimizer = mode.prepare_optimizer(optimizer)
    with mode.autocast(): ...              # every forward
    mode.measure_next_step(optimizer)      # the next optimizer step writes a metrics row
    mode.before_optimizer_step(optimizer)  # on the last micro-batch of a window
    mode.after_optimizer_step(optimizer, stepped)
    row = mode.step_metrics(optimizer, step=..., names=...)   # each logged step
    fields = mode.result_fields()          # the run summary (FitResult)
    rows = mode.summary_rows(fields)       # the command line's end-of-run summary
    mode.state_dict() / load_state_dict()  # inside the engine's checkpoint state
    sections = mode.doctor_sections(model, closure, steps=..., lr=...)   # ampkit doctor

Every hook has a default that does nothing, so a mode overrides only what it changes.

What a mode reports is declared on its class: :attr:`PrecisionMode.metric_fields` (the keys
:meth:`~PrecisionMode.step_metrics` returns, written into each metrics row) and
:attr:`PrecisionMode.result_field_specs` (the keys of :meth:`~PrecisionMode.result_fields`, in
the run summary), each a :class:`ModeField`. ``StepMetrics``, ``FitResult``, ``TrainSummary``
and the command line carry and print these by the declaration alone, never by name, so a new
metric of a mode is an edit to that mode's file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ampkit.errors import ConfigurationError
from ampkit.precision.spelling import (
    ParsedPrecision,
    PrecisionFacts,
    parse_precision,
    precision_facts,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ampkit.precision.policy import Policy

__all__ = ["DoctorSection", "ModeField", "ModeOption", "PrecisionMode", "TrainingSetup"]

#: The number format the doctor measures under each autocast dtype (by torch dtype name).
_FORMAT_OF: dict[str, str] = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class TrainingSetup:
    """What a training loop knows before the first step, for :meth:`PrecisionMode.setup_training`.

    Attributes:
        model: the model on its device, before :meth:`PrecisionMode.prepare_model`.
        closure: runs the forward pass of one real batch and returns the loss (the batch is
            read only when it is called); None when there is no data to look at.
        distributed: whether several processes train together (``torch.distributed``).
        fsdp: whether the model will be sharded with FSDP2 across those processes.
        keep_fp32: names of the modules the run keeps in fp32 (fp32 islands).
    """

    model: nn.Module
    closure: Callable[[], torch.Tensor] | None = None
    distributed: bool = False
    fsdp: bool = False
    keep_fp32: tuple[str, ...] = ()


@dataclass(frozen=True)
class DoctorSection:
    """A part of ``ampkit doctor``'s report that a mode adds (fp8: the per-layer plan).

    Attributes:
        key: its key in the report's JSON (fp8: ``"fp8_plan"``).
        text: the terminal rendering.
        data: the JSON-ready values.
    """

    key: str
    text: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_text(self) -> str:
        """The section as printed after the report."""
        return self.text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return dict(self.data)


@dataclass(frozen=True)
class ModeField:
    """One value a mode adds to a metrics row or to the run summary.

    Attributes:
        name: its key (in ``metrics.jsonl``, ``summary.json`` and as an attribute of
            ``StepMetrics``/``FitResult``/``TrainSummary``, None when the mode did not set it).
        type: the Python type of a set value (``float``, ``str``).
        description: one line, for the docs and the loggers.
    """

    name: str
    type: type
    description: str


@dataclass(frozen=True)
class ModeOption:
    """An option of a mode that ``ampkit train`` offers as a flag (``--state-precision``): the
    mode declares it, the command line's option, the ``--config`` key, the settings check and
    the resume rule are made from it, and the value reaches the mode's constructor keyword of
    the same name.

    Attributes:
        name: the constructor's keyword; the flag is ``--`` plus it
            with dashes, the ``--config`` key and the recorded setting are the name.
        type: the type of a value: ``str``, ``int``, ``float`` or ``bool``.
        help: the flag's ``--help`` text, after the precisions it applies to.
        default: what leaving it unset means (the constructor's default), shown in ``--help``
            and equal to the unset value on resume.
        choices: the values allowed (None: any value of ``type``; the mode checks ranges).
        on_resume: ``"compared"`` (a resume must keep it: it changes what a step computes) or
            ``"free"`` (it may change on resume).
        added_later: checkpoints of runs before the option existed lack it; such a record
            is compared as if it held the unset value.
        metavar: how ``--help`` names the value.
    """

    name: str
    type: type
    help: str
    default: Any = None
    choices: tuple[str, ...] | None = None
    on_resume: Literal["compared", "free"] = "compared"
    added_later: bool = False
    metavar: str | None = None


class PrecisionMode:
    """One precision mode: the hooks a training run calls (module doc: the order).

    A subclass sets :attr:`precisions` (the canonical names it trains in), takes its options
    as keyword-only constructor parameters (held by the object), declares what it reports
    (:attr:`metric_fields`, :attr:`result_field_specs`), overrides :meth:`from_parsed` when its
    constructor does not take the precision first, and overrides the hooks it needs. :attr:`name` is the canonical precision
    of the object; :meth:`resolve` turns it into a :class:`Policy`.

    Args:
        precision: a spelling of one of :attr:`precisions` (``"fp16-mixed"``), or that
            spelling already read (a :class:`~ampkit.precision.spelling.ParsedPrecision`: the
            mode does not parse it again).

    Raises:
        ConfigurationError: ``precision`` is unknown, ``"auto"``, or not one of
            :attr:`precisions`.
    """

    #: The canonical precisions this class trains in (its registry keys); from
    #: :attr:`precision_facts` when the class declares those.
    precisions: ClassVar[tuple[str, ...]] = ()

    #: What each precision of the class is: its names, dtypes (by torch dtype name), loss
    #: scaling and (fp8) recipes, one :class:`~ampkit.precision.spelling.PrecisionFacts` per
    #: precision. What :func:`~ampkit.parse_precision` and :func:`~ampkit.resolve_precision`
    #: know of the precision comes from here (no torch needed to read it).
    precision_facts: ClassVar[tuple[PrecisionFacts, ...]] = ()

    #: The options ``ampkit train`` offers as flags (a subset of the constructor's keywords).
    cli_options: ClassVar[tuple[ModeOption, ...]] = ()

    #: The old ``MixedPrecision``/``AmpkitPrecision`` keywords of the mode's options -> its
    #: constructor's keyword (``fp8_plan`` -> ``plan``), kept for one release with a
    #: ``DeprecationWarning`` (:mod:`ampkit.precision.modes._deprecated`). A new option needs
    #: no entry: it is a constructor keyword only.
    options: ClassVar[Mapping[str, str]] = {}

    #: The keys :meth:`step_metrics` may return (each logged step's metrics row).
    metric_fields: ClassVar[tuple[ModeField, ...]] = ()

    #: The keys :meth:`result_fields` returns (the run summary).
    result_field_specs: ClassVar[tuple[ModeField, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "precision_facts" in cls.__dict__ and "precisions" not in cls.__dict__:
            cls.precisions = tuple(facts.name for facts in cls.precision_facts)

    def __init__(self, precision: str | ParsedPrecision) -> None:
        parsed = precision if isinstance(precision, ParsedPrecision) else parse_precision(precision)
        if parsed.precision not in type(self).precisions:
            allowed = ", ".join(repr(p) for p in type(self).precisions)
            raise ConfigurationError(
                f"precision: {type(self).__name__} trains in {allowed}, not {parsed.spelled!r}"
                + (
                    " ('auto' is decided by the hardware: pass precision='auto' to "
                    "MixedPrecision or the Trainer instead of a mode object)."
                    if parsed.precision == "auto"
                    else ". Use the mode class of that precision, or its name as a string."
                )
            )
        self._parsed = parsed
        self._policy: Policy | None = None

    @classmethod
    def from_parsed(cls, parsed: ParsedPrecision, options: Mapping[str, Any]) -> PrecisionMode:
        """Build the mode for ``parsed`` with ``options`` (constructor keywords, the values
        given). The default passes ``parsed`` (read once, not parsed again) and the options
        to the constructor."""
        return cls(parsed, **options)  # type: ignore[call-arg]

    @classmethod
    def from_policy(cls, policy: Policy, options: Mapping[str, Any]) -> PrecisionMode:
        """Build the mode for a resolved ``policy`` and bind it. The default builds it for
        the policy's canonical precision (:meth:`from_parsed`)."""
        parsed = ParsedPrecision(policy.precision, policy.precision, policy.fp8_recipe)
        return cls.from_parsed(parsed, options).bind(policy)

    # -- identity and policy ---------------------------------------------------------------

    @property
    def name(self) -> str:
        """The canonical precision this mode trains in (``"bf16-true"``)."""
        return self._parsed.precision

    @property
    def spelling(self) -> str:
        """What :meth:`resolve` passes to :func:`~ampkit.resolve_precision`."""
        return str(self._parsed.spelled).strip().lower()

    @property
    def bound(self) -> bool:
        """Whether :meth:`bind` gave the mode its policy."""
        return self._policy is not None

    @property
    def policy(self) -> Policy:
        """The run's policy.

        Raises:
            ConfigurationError: the mode was not bound yet (give it to ``MixedPrecision``).
        """
        if self._policy is None:
            raise ConfigurationError(
                f"{self!r}: no policy yet. Pass the mode to MixedPrecision or the Trainer "
                "(precision=...), which resolve it for the device."
            )
        return self._policy

    @property
    def measured_as(self) -> str:
        """The number format the doctor measures the autocast numerics in (``"bf16"`` for
        fp8 and bf16-true: every op outside their own machinery runs in bf16 autocast)."""
        return _FORMAT_OF[precision_facts(self.name).compute_dtype]

    def resolve(
        self, device: torch.device | str | None = None, *, tf32: bool | None = None
    ) -> Policy:
        """The policy for ``device`` under the hardware rules (:func:`~ampkit.resolve_precision`).

        Raises:
            ConfigurationError, UnsupportedPrecisionError, MissingDependencyError: as
                :func:`~ampkit.resolve_precision`.
        """
        from ampkit.precision.policy import resolve_precision

        return resolve_precision(self.spelling, device, tf32=tf32)

    def bind(self, policy: Policy) -> PrecisionMode:
        """Give the mode the run's ``policy``; return the mode.

        Raises:
            ConfigurationError: the policy is for another precision, or the mode is bound to
                another policy already (one mode object per run).
        """
        if policy.precision != self.name:
            raise ConfigurationError(
                f"precision: {self!r} trains in {self.name}, but the policy given is for "
                f"{policy.precision}. Pass a policy of resolve_precision({self.name!r}), or "
                "the mode alone.",
                argument="precision",
            )
        if self._policy is not None and self._policy != policy:
            raise ConfigurationError(
                f"precision: {self!r} already belongs to a run with another policy "
                f"({self._policy.describe()}). Build a new mode object for each run.",
                argument="precision",
            )
        self._policy = policy
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # -- hooks: set-up -----------------------------------------------------------------------

    def compile_default(self, compile: bool | None) -> bool:
        """The Trainer's ``compile`` setting: ``None`` means the mode's default (off)."""
        return bool(compile)

    def setup_training(self, setup: TrainingSetup) -> list[str]:
        """Prepare from what the run knows before the first step (fp8: the plan from the
        first batch); return notes for the run summary. Called before :meth:`prepare_model`."""
        return []

    def prepare_model(self, model: nn.Module) -> nn.Module:
        """Make ``model`` ready for the precision, in place; return it. Default: unchanged."""
        return model

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """The optimizer to train with (bf16-true wraps it). Default: ``optimizer``."""
        return optimizer

    # -- hooks: every step -------------------------------------------------------------------

    def autocast(self) -> Any:
        """The forward pass's autocast region: the policy's (explicit fp32 for fp32)."""
        return self.policy.autocast()

    def measure_next_step(self, optimizer: torch.optim.Optimizer) -> None:
        """The next optimizer step writes a metrics row: measure what :meth:`step_metrics`
        reports. Default: nothing to measure."""

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """On the last micro-batch of a window, before the gradients are unscaled and the
        optimizer steps. Default: nothing."""

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer, stepped: bool) -> None:
        """After the optimizer step (``stepped``: it ran; False: skipped for inf/NaN) and the
        loss-scale update. Default: nothing."""

    # -- hooks: what the run reports ---------------------------------------------------------

    def step_metrics(
        self, optimizer: torch.optim.Optimizer, *, step: int, names: Mapping[int, str]
    ) -> dict[str, Any]:
        """Fields of the logged step's metrics row (``StepMetrics``) the mode measured, keys
        of :attr:`metric_fields`; ``names`` maps ``id(parameter)`` to its name. Default:
        none."""
        return {}

    def result_fields(self) -> dict[str, Any]:
        """Fields of the run summary (``FitResult``) the mode sets, the keys of
        :attr:`result_field_specs`. Default: none."""
        return {}

    @classmethod
    def summary_rows(cls, fields: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``(label, text)`` rows the command line's end-of-run summary prints for ``fields``
        (what :meth:`result_fields` returned, as recorded in ``summary.json``). Default:
        none."""
        return []

    def state_dict(self) -> dict[str, Any]:
        """State to keep in checkpoints (inside the engine's). Default: none (``{}``)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            CheckpointError: the state does not belong to this mode.
        """
        if state:
            from ampkit.errors import CheckpointError

            raise CheckpointError(
                f"{self!r}: the checkpoint holds mode state {sorted(state)}, but this mode keeps "
                "none. Resume with the precision of the saved run."
            )

    def doctor_sections(
        self,
        model: nn.Module,
        closure: Callable[[], torch.Tensor],
        *,
        steps: int,
        lr: float,
    ) -> list[DoctorSection]:
        """Sections ``ampkit doctor`` adds for this mode, computed on the fp32 ``model``
        (left unchanged); ``steps`` and ``lr`` size its probes. Default: none."""
        return []
