"""Apply an fp8 plan: swap the planned ``nn.Linear`` layers for torchao's ``Float8Linear``.

Everything torchao is imported here, lazily, so ``import ampkit`` and every other precision
work without it; without torchao the functions raise :class:`MissingDependencyError`.

torchao swaps every ``nn.Linear`` subclass it is given for a ``Float8Linear``, which computes
``F.linear``: :func:`linear_kept_reason` is the one rule of which subclasses may be swapped
(those that keep Linear's ``forward``, or whose own ``forward`` computes the same on a probe
input, as Falcon's ``FalconLinear`` does) and why the others are kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ampkit._logging import quiet_loggers
from ampkit.errors import ConfigurationError, MissingDependencyError

__all__ = [
    "RECIPES",
    "convert_to_fp8",
    "float8_config",
    "fp8_layer_names",
    "import_float8",
    "linear_kept_reason",
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


def _probe_matches_linear(module: nn.Linear) -> str | None:
    """None when ``type(module).forward`` gives ``F.linear``'s result on a seeded random
    input (hooks bypassed, no autocast, no grad); else what differed."""
    weight = module.weight
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, module.in_features, generator=generator, dtype=weight.dtype)
    x = x.to(weight.device)
    try:
        with torch.no_grad(), torch.autocast(weight.device.type, enabled=False):
            got = type(module).forward(module, x)
            expected = F.linear(x, weight, module.bias)
    except Exception as exc:  # any failure means the forward is not Linear's
        return f"its forward raised {type(exc).__name__} on a probe input"
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return "its forward returns something other than F.linear's output"
    scale = expected.abs().max().item()
    if (got - expected).abs().max().item() > 1e-5 * scale + 1e-6:
        return "its forward computes something other than F.linear"
    return None


def linear_kept_reason(module: nn.Module) -> str | None:
    """Why ``module`` is kept out of fp8 conversion, or None when torchao can swap it for a
    ``Float8Linear`` (whose forward is ``F.linear`` on fp8-cast operands).

    Swappable: ``nn.Linear`` itself, a subclass that keeps Linear's ``forward``, and a
    subclass whose own ``forward`` holds only ``weight`` and ``bias`` and gives ``F.linear``'s
    result on a probe input (Falcon's ``FalconLinear`` computes ``input @ weight.T + bias``).
    Kept: anything else, with the reason.
    """
    if not isinstance(module, nn.Linear):
        return f"{type(module).__name__} is not an nn.Linear"
    cls = type(module)
    if cls is nn.Linear or cls.forward is nn.Linear.forward:
        return None
    name = cls.__name__
    if name == "Float8Linear":
        return "already a Float8Linear"
    own = {n for n, _ in module.named_parameters(recurse=False)} | {
        n for n, _ in module.named_buffers(recurse=False)
    }
    if own - {"weight", "bias"} or next(module.children(), None) is not None:
        return f"{name} overrides forward and holds more than weight and bias"
    if module.weight.is_meta:
        return f"{name} overrides forward (cannot be probed on the meta device)"
    differs = _probe_matches_linear(module)
    return None if differs is None else f"{name} overrides forward: {differs}"


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
    ``state_dict`` keys. ``nn.Linear`` subclasses are swapped where :func:`linear_kept_reason`
    allows it.

    Returns:
        The converted layer names, in model order.

    Raises:
        ConfigurationError: a name is not an ``nn.Linear`` of ``model`` (a plan made for
            another model) or is a subclass that must be kept (its forward is not Linear's),
            or an invalid recipe.
        MissingDependencyError: torchao is not installed.
    """
    wanted = set(layers)
    modules = dict(model.named_modules())
    wrong = sorted(n for n in wanted if not isinstance(modules.get(n), nn.Linear))
    if wrong:
        seen = ", ".join(
            f"{n} ({type(modules[n]).__name__ if n in modules else 'missing'})" for n in wrong[:5]
        )
        raise ConfigurationError(
            f"fp8_plan: the plan names layers that are not nn.Linear modules of this model: "
            f"{seen}. Make the plan for this model (ampkit.fp8_plan(model, batch)), before "
            "converting or wrapping it."
        )
    kept = [(n, linear_kept_reason(modules[n])) for n in sorted(wanted)]
    kept = [(n, why) for n, why in kept if why is not None]
    if kept:
        seen = "; ".join(f"{n}: {why}" for n, why in kept[:3])
        raise ConfigurationError(
            f"fp8_plan: the plan names {len(kept)} Linear layer(s) that fp8 cannot replace "
            f"({seen}). Make the plan for this model (ampkit.fp8_plan(model, batch)), which "
            "keeps them."
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
