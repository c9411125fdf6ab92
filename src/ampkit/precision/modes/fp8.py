"""``Fp8``: torchao's float8 Linears for the layers a per-layer plan selects, bf16 autocast
everywhere else.

The plan (:func:`~ampkit.fp8_plan`) is given, or measured on the run's first batch
(:meth:`Fp8.setup_training`; rank 0's plan is broadcast so every rank converts the same
layers). Under FSDP2 with the tensorwise recipe the weights are all-gathered in fp8 and their
scales precomputed after every optimizer step. On CUDA the Trainer compiles by default (eager
fp8 runs separate cast and scale kernels). ``ampkit doctor`` shows the plan.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ampkit._stack import user_stacklevel
from ampkit.errors import ConfigurationError, PrecisionWarning
from ampkit.precision.modes.base import DoctorSection, PrecisionMode, TrainingSetup
from ampkit.precision.spelling import ParsedPrecision, PrecisionFacts

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ampkit.precision.fp8.planning import Fp8Plan
    from ampkit.precision.policy import Policy

__all__ = ["Fp8"]

#: The torchao float8 recipe (``Float8LinearConfig.from_recipe_name``) each spelling names.
_RECIPES = {
    "fp8": "tensorwise",
    "fp8-tensorwise": "tensorwise",
    "fp8-rowwise": "rowwise",
    "fp8-rowwise-gw-hp": "rowwise_with_gw_hp",
}

#: recipe -> the shortest spelling naming it (``tensorwise`` -> ``fp8``).
_SPELLING: dict[str, str] = {}
for _spelled, _recipe in _RECIPES.items():
    _SPELLING.setdefault(_recipe, _spelled)


class Fp8(PrecisionMode):
    """fp8 matmuls in the planned Linear layers (torchao float8 training).

    Args:
        recipe: torchao's recipe: ``"tensorwise"`` (default), ``"rowwise"`` or
            ``"rowwise_with_gw_hp"``.
        plan: the :class:`~ampkit.Fp8Plan` to apply; None: measured on the first batch by the
            Trainer (or, in a hand-written loop, shape rules and torchao's size prior alone).
        emulate: torchao emulates the fp8 matmuls where the hardware has none (CPU tests;
            numerics only, no speed-up).
        fsdp_float8_all_gather: all-gather FSDP2 weight shards in fp8; None: on under FSDP2
            across processes with the tensorwise recipe.

    Example::

        Trainer(model, opt, max_steps=10, precision=ampkit.Fp8(recipe="rowwise", plan=plan))

    Raises:
        ConfigurationError: an unknown recipe, or a plan made for another recipe.
    """

    precision_facts: ClassVar[tuple[PrecisionFacts, ...]] = (
        # every op that is not an fp8 Linear runs under bf16 autocast
        PrecisionFacts(
            "fp8",
            tuple(s for s in _RECIPES if s != "fp8"),
            compute_dtype="bfloat16",
            recipes=_RECIPES,
        ),
    )
    options: ClassVar[Mapping[str, str]] = {"fp8_plan": "plan"}

    def __init__(
        self,
        recipe: str = "tensorwise",
        *,
        plan: Fp8Plan | None = None,
        emulate: bool = False,
        fsdp_float8_all_gather: bool | None = None,
    ) -> None:
        if recipe not in _SPELLING:
            raise ConfigurationError(
                f"recipe: {recipe!r} is unknown. Use one of {', '.join(map(repr, _SPELLING))}."
            )
        super().__init__(ParsedPrecision("fp8", _SPELLING[recipe], recipe))  # no parse needed
        self.recipe = recipe
        self.emulate = bool(emulate)
        self.fsdp_float8_all_gather = fsdp_float8_all_gather
        self._all_gather = bool(fsdp_float8_all_gather)
        self._model: nn.Module | None = None
        self.plan = plan

    @property
    def plan(self) -> Fp8Plan | None:
        """The plan :meth:`prepare_model` applies (None: not planned yet)."""
        return self._plan

    @plan.setter
    def plan(self, plan: Fp8Plan | None) -> None:
        if plan is not None and plan.recipe != self.recipe:
            raise ConfigurationError(
                f"fp8_plan: the plan was made for the {plan.recipe} recipe, but precision "
                f"{self.spelling!r} uses {self.recipe}. Make the plan with "
                f"recipe={self.recipe!r}, or ask for the precision of its recipe."
            )
        self._plan = plan

    @classmethod
    def from_parsed(cls, parsed: ParsedPrecision, options: Mapping[str, Any]) -> PrecisionMode:
        return cls(parsed.fp8_recipe or "tensorwise", **options)

    @classmethod
    def from_policy(cls, policy: Policy, options: Mapping[str, Any]) -> PrecisionMode:
        mode = cls(policy.fp8_recipe or "tensorwise", emulate=policy.emulate, **options)
        return mode.bind(policy)

    def __repr__(self) -> str:
        return f"Fp8(recipe={self.recipe!r}{', emulate=True' if self.emulate else ''})"

    def resolve(
        self, device: torch.device | str | None = None, *, tf32: bool | None = None
    ) -> Policy:
        from ampkit.precision.policy import resolve_precision

        return resolve_precision(self.spelling, device, tf32=tf32, emulate=self.emulate)

    def bind(self, policy: Policy) -> PrecisionMode:
        if policy.emulate != self.emulate and policy.precision == self.name:
            raise ConfigurationError(
                f"emulate: {self!r} and the policy given (emulate={policy.emulate}) disagree. "
                "Pass the mode alone, or a policy with the same emulate."
            )
        return super().bind(policy)

    def compile_default(self, compile: bool | None) -> bool:
        """``None``: on on CUDA (eager fp8 is slower than bf16), else off.

        Warns:
            PrecisionWarning: ``compile=False`` on CUDA.
        """
        gpu = self.policy.device.type == "cuda"
        if compile is None:
            return gpu
        if gpu and not compile:
            warnings.warn(
                "Trainer: compile=False under fp8 on CUDA: eager fp8 runs separate cast and "
                "scale kernels and is slower than bf16. Leave compile at its default (on for "
                "fp8), or train in bf16.",
                PrecisionWarning,
                stacklevel=user_stacklevel(),
            )
        return compile

    def setup_training(self, setup: TrainingSetup) -> list[str]:
        """Measure the plan on the first batch unless one was given (rank 0's is broadcast),
        leave the layers inside fp32 islands out of it, and decide the FSDP2 fp8 all-gather.
        Returns the plan's one-line summary."""
        from ampkit.precision.fp8.planning import fp8_plan

        all_gather = self.fsdp_float8_all_gather
        self._all_gather = (
            setup.fsdp and self.recipe == "tensorwise" if all_gather is None else all_gather
        )
        if self._plan is None and setup.closure is not None:
            measured = fp8_plan(setup.model, closure=setup.closure, recipe=self.recipe)
            if setup.distributed:
                import torch.distributed as dist

                shared = [measured]
                dist.broadcast_object_list(shared, src=0)
                measured = shared[0]
            self._plan = measured
        plan = self._plan
        if plan is None:
            return []
        if setup.keep_fp32:
            plan = self._plan = plan.excluding(setup.keep_fp32, "kept in fp32 (keep_fp32)")
        how = "measured" if plan.measured else "shape rules and torchao's size prior"
        return [
            f"fp8 ({plan.recipe}): {len(plan.selected)} of {len(plan.layers)} Linear layers "
            f"converted ({how})"
        ]

    def prepare_model(self, model: nn.Module) -> nn.Module:
        """Convert the Linear layers :attr:`plan` selects to torchao's Float8Linear (without a
        plan: those that pass the shape rules and torchao's size prior).

        Raises:
            ConfigurationError: the plan names layers that are not Linears of ``model``.
            MissingDependencyError: torchao is not installed.
        """
        from ampkit.precision.fp8.convert import convert_to_fp8
        from ampkit.precision.fp8.planning import fp8_plan

        plan = self._plan or fp8_plan(model, recipe=self.recipe, measure=False)
        convert_to_fp8(
            model,
            plan.selected,
            plan.recipe,
            emulate=self.policy.emulate,
            fsdp_float8_all_gather=self._all_gather,
        )
        self._model = model
        return model

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer, stepped: bool) -> None:
        """Under the FSDP2 fp8 all-gather: precompute every fp8 weight's scale (one
        all-reduce) after a step that ran."""
        if stepped and self._all_gather and self._model is not None:
            from ampkit.precision.fp8.convert import precompute_fsdp_scales

            precompute_fsdp_scales(self._model)

    def state_dict(self) -> dict[str, Any]:
        """``{"layer_recipes": {layer: recipe}}``: the recipe each converted layer trains in,
        so a resume cannot change it silently (empty before the plan exists)."""
        plan = self._plan
        return {} if plan is None else {"layer_recipes": plan.layer_recipes}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Check that this run trains the same layers in the same recipes as the checkpoint.
        A checkpoint without fp8 state (written before it was recorded) is accepted.

        Raises:
            CheckpointError: another recipe, or other layers, than the checkpoint's.
        """
        saved = dict(state.get("layer_recipes", {})) if state else {}
        now = self._plan.layer_recipes if self._plan is not None else None
        if not saved or now is None or saved == now:
            return
        from ampkit.errors import CheckpointError

        changed = sorted(
            f"{n}: {saved.get(n, 'bf16')} -> {now.get(n, 'bf16')}"
            for n in set(saved) | set(now)
            if saved.get(n) != now.get(n)
        )
        raise CheckpointError(
            f"fp8: the checkpoint's layers trained in other fp8 recipes than this run's plan "
            f"({len(changed)} differ: {'; '.join(changed[:4])}). A resume must keep them: pass "
            "the plan of the saved run (ampkit.Fp8(recipe=..., plan=...)), or start fresh."
        )

    def doctor_sections(
        self,
        model: nn.Module,
        closure: Callable[[], torch.Tensor],
        *,
        steps: int,
        lr: float,
    ) -> list[DoctorSection]:
        """``fp8_plan``: the per-layer plan measured with ``closure``."""
        from ampkit.precision.fp8.planning import fp8_plan

        plan = fp8_plan(model, closure=closure, recipe=self.recipe)
        return [DoctorSection("fp8_plan", plan.to_text(), plan.to_dict())]
