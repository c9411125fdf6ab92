"""Apply an fp8 plan: swap the planned ``nn.Linear`` layers for torchao's ``Float8Linear``.

Everything torchao is imported here, lazily, so ``import ampkit`` and every other precision
work without it; without torchao the functions raise :class:`MissingDependencyError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from ampkit._logging import quiet_loggers
from ampkit.errors import ConfigurationError, MissingDependencyError

__all__ = [
    "RECIPES",
    "convert_to_fp8",
    "float8_config",
    "fp8_layer_names",
    "import_float8",
    "precompute_fsdp_scales",
]

#: torchao's float8 training recipes (``Float8LinearConfig.from_recipe_name``).
RECIPES: tuple[str, ...] = ("tensorwise", "rowwise", "rowwise_with_gw_hp")


def import_float8() -> Any:
    """``torchao.float8``, imported on first use.

    torchao logs a warning for each optional CUDA kernel library it cannot load (on a CPU:
    all of them); the ``torchao`` logger is raised to ERROR for the import and restored.

    Raises:
        MissingDependencyError: torchao is not installed.
    """
    try:
        with quiet_loggers():
            import torchao.float8 as float8
    except ImportError as exc:
        raise MissingDependencyError(
            f"fp8: torchao is not installed ({exc}). fp8 training is built on torchao.float8: "
            "pip install 'ampkit[fp8]' (torchao 0.18 pairs with torch 2.13)."
        ) from exc
    return float8


def float8_config(
    recipe: str, *, emulate: bool = False, fsdp_float8_all_gather: bool = False
) -> Any:
    """torchao's ``Float8LinearConfig`` for ``recipe``.

    Args:
        recipe: one of :data:`RECIPES`.
        emulate: emulate the fp8 matmuls (CPU, tests).
        fsdp_float8_all_gather: all-gather FSDP2 weight shards in fp8 (tensorwise only).

    Raises:
        ConfigurationError: an unknown recipe, or fp8 all-gather with a rowwise recipe.
        MissingDependencyError: torchao is not installed.
    """
    if recipe not in RECIPES:
        raise ConfigurationError(
            f"fp8 recipe: {recipe!r} is unknown. Use one of {', '.join(RECIPES)} "
            "(precision fp8-tensorwise, fp8-rowwise or fp8-rowwise-gw-hp)."
        )
    if fsdp_float8_all_gather and recipe != "tensorwise":
        raise ConfigurationError(
            f"fp8: FSDP fp8 all-gather works with the tensorwise recipe only, not {recipe!r}. "
            "Use precision 'fp8' (tensorwise) with strategy 'fsdp'."
        )
    config = import_float8().Float8LinearConfig.from_recipe_name(recipe)
    return dataclasses.replace(
        config, emulate=emulate, enable_fsdp_float8_all_gather=fsdp_float8_all_gather
    )


def _cast_input_to_cpu_autocast(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """torchao's Float8Linear applies CUDA autocast only; apply the CPU one the same way, so
    emulated runs see the dtypes a GPU run sees (rowwise_with_gw_hp needs it)."""
    if not torch.is_autocast_enabled("cpu"):
        return args
    dtype = torch.get_autocast_dtype("cpu")
    return tuple(
        a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
    )


def fp8_layer_names(model: nn.Module) -> list[str]:
    """Names of the modules of ``model`` that are torchao ``Float8Linear`` layers."""
    return [n for n, m in model.named_modules() if type(m).__name__ == "Float8Linear"]


def convert_to_fp8(
    model: nn.Module,
    layers: Iterable[str],
    recipe: str,
    *,
    emulate: bool = False,
    fsdp_float8_all_gather: bool = False,
) -> list[str]:
    """Swap exactly the ``nn.Linear`` layers named in ``layers`` for ``Float8Linear``, in place.

    Parameters keep their identity (an optimizer built before still holds them) and their
    ``state_dict`` keys.

    Returns:
        The converted layer names, in model order.

    Raises:
        ConfigurationError: a name is not an ``nn.Linear`` of ``model`` (a plan made for
            another model), or an invalid recipe.
        MissingDependencyError: torchao is not installed.
    """
    wanted = set(layers)
    modules = dict(model.named_modules())
    wrong = sorted(n for n in wanted if type(modules.get(n)) is not nn.Linear)
    if wrong:
        seen = ", ".join(
            f"{n} ({type(modules[n]).__name__ if n in modules else 'missing'})" for n in wrong[:5]
        )
        raise ConfigurationError(
            f"fp8_plan: the plan names layers that are not nn.Linear modules of this model: "
            f"{seen}. Make the plan for this model (ampkit.fp8_plan(model, batch)), before "
            "converting or wrapping it."
        )
    config = float8_config(recipe, emulate=emulate, fsdp_float8_all_gather=fsdp_float8_all_gather)
    import_float8().convert_to_float8_training(
        model, module_filter_fn=lambda module, fqn: fqn in wanted, config=config
    )
    converted = [n for n in fp8_layer_names(model) if n in wanted]
    for name in converted:
        modules = dict(model.named_modules())
        modules[name].register_forward_pre_hook(_cast_input_to_cpu_autocast)
    return converted


def precompute_fsdp_scales(model: nn.Module) -> None:
    """After each optimizer step under FSDP2 with fp8 all-gather: compute every fp8 weight's
    scale in one all-reduce (torchao's ``precompute_float8_dynamic_scale_for_fsdp``).

    Raises:
        MissingDependencyError: torchao is not installed.
    """
    import_float8().precompute_float8_dynamic_scale_for_fsdp(model)
