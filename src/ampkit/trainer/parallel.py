"""What a bigger model needs beyond plain data parallelism: HSDP meshes, activation
checkpointing, CPU offload, and recognising a model the user sharded already.

* :func:`hsdp_mesh`: the 2-D ``DeviceMesh`` (``replicate`` x ``shard``) FSDP2 shards over
  for ``strategy="hsdp"``: parameters are sharded within a group of ``shard`` processes and
  replicated across the groups (gradients all-reduced between replicas). By default a group
  is one node (``LOCAL_WORLD_SIZE``), so the cheap intra-node links carry the all-gathers.
* :func:`apply_activation_checkpointing`: torch's composable, non-reentrant activation
  checkpointing (``torch.distributed._composable.checkpoint``, the one ``fully_shard``
  composes with) on chosen modules: their activations are recomputed in the backward pass
  instead of kept. It keeps the modules' names (checkpoints are the same with and without it)
  and preserves the RNG state for the recomputation (dropout draws the same mask), so
  gradients are those of the run without it.
* :func:`fsdp_options`: the extra ``fully_shard`` keywords (mesh, CPU offload policy).
* :func:`is_sharded`: whether a model holds DTensor parameters (FSDP2 applied, by ampkit or by
  the user), which decides how its state is gathered and saved.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from torch import nn

from ampkit.errors import ConfigurationError
from ampkit.precision.fp32_modules import select_modules

__all__ = [
    "apply_activation_checkpointing",
    "check_module_targets",
    "default_shard_size",
    "fsdp2_name",
    "fsdp_options",
    "hsdp_mesh",
    "is_sharded",
    "setting_notes",
]


def check_module_targets(name: str, targets: object) -> tuple[str | type[nn.Module], ...]:
    """``targets`` as a tuple of module names and ``nn.Module`` subclasses.

    Raises:
        ConfigurationError: ``targets`` is a single string or not iterable, or holds
            something that is neither a name nor a module type.
    """
    if isinstance(targets, (str, type)) or not isinstance(targets, Iterable):
        raise ConfigurationError(
            f"{name}: {targets!r} is not a list of modules. Pass module names and/or types, "
            "e.g. [nn.TransformerEncoderLayer] or ['blocks.0', 'blocks.1'].",
            argument=name,
        )
    found = tuple(targets)
    for target in found:
        if not (
            (isinstance(target, str) and target)
            or (isinstance(target, type) and issubclass(target, nn.Module))
        ):
            raise ConfigurationError(
                f"{name}: {target!r} is neither a module name nor an nn.Module subclass. "
                "Pass names such as 'blocks.0' or types such as nn.TransformerEncoderLayer.",
                argument=name,
            )
    return found


def _select(
    model: nn.Module, targets: Sequence[str | type[nn.Module]], name: str
) -> list[tuple[str, nn.Module]]:
    """The modules of ``model`` that ``targets`` name, in ``named_modules`` order; a module
    inside an already chosen one is left out (its parent recomputes it)."""

    def never_called(target: str, module: nn.Module) -> None:
        if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            kind = type(module).__name__
            raise ConfigurationError(
                f"{name}: {target!r} is a {kind}, which is never called, so there is no "
                f"forward pass to recompute. Name its modules ('{target}.0', ...) or pass "
                "their type.",
                argument=name,
            )

    chosen = dict(select_modules(model, targets, name, check_named=never_called))
    names = list(chosen)  # in named_modules order
    outer = [n for n in names if not any(n != p and n.startswith(f"{p}.") for p in names if p)]
    if "" in outer:
        outer = [""]
    return [(n, chosen[n]) for n in outer]


def apply_activation_checkpointing(
    model: nn.Module, targets: Sequence[str | type[nn.Module]]
) -> list[str]:
    """Recompute the activations of the chosen modules in the backward pass (non-reentrant,
    RNG state preserved); return the names of the modules it applies to.

    Apply it before FSDP2 shards the model. Module and parameter names are unchanged, so
    checkpoints and ``state_dict`` keys are those of the model without it.

    Args:
        model: the model; hooks are added to the chosen modules, nothing is replaced.
        targets: module names as ``model.named_modules()`` spells them (``"blocks.0"``)
            and/or ``nn.Module`` subclasses (every module of that type). A module inside
            another chosen one is recomputed by its parent, not again.

    Raises:
        ConfigurationError: a name that is not a module of ``model`` (with a did-you-mean),
            a type no module has, or a target that is neither.
    """
    from torch.distributed._composable import checkpoint

    name = "activation_checkpointing"
    chosen = _select(model, check_module_targets(name, targets), name)
    for _, module in chosen:
        if checkpoint.state(module) is None:  # a second fit() of the same Trainer: once
            checkpoint(module)
    return [name or "(the whole model)" for name, _ in chosen]


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model`` holds DTensor parameters: FSDP2 (``fully_shard``) was applied to it,
    by ampkit or by the user. Its state is then gathered with
    ``torch.distributed.checkpoint.state_dict`` (collectively), never read tensor by tensor."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def default_shard_size() -> int:
    """Processes per HSDP shard group by default: one node (``LOCAL_WORLD_SIZE``, which
    torchrun sets; 1 without it)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def hsdp_mesh(device_type: str, world_size: int, shard_size: int | None = None) -> Any:
    """The 2-D mesh ``(replicate, shard)`` of an HSDP run over ``world_size`` processes.

    Args:
        device_type: ``"cpu"``, ``"cuda"``, ...: the mesh's device type.
        world_size: processes in the job.
        shard_size: processes each parameter is sharded over (None: one node,
            :func:`default_shard_size`); ``world_size // shard_size`` replicas.

    Raises:
        ConfigurationError: ``shard_size`` does not divide ``world_size``.
    """
    from torch.distributed.device_mesh import init_device_mesh

    shard = default_shard_size() if shard_size is None else shard_size
    if shard < 1 or world_size % shard:
        given = "hsdp_shard_size" if shard_size is not None else "LOCAL_WORLD_SIZE (the default)"
        raise ConfigurationError(
            f"hsdp_shard_size: {given} = {shard} does not divide the world size {world_size}, "
            "so the processes cannot form equal shard groups. Pass a hsdp_shard_size that "
            f"divides {world_size} (e.g. the processes per node).",
            argument="hsdp_shard_size",
        )
    return init_device_mesh(
        device_type, (world_size // shard, shard), mesh_dim_names=("replicate", "shard")
    )


def fsdp2_name(name: str) -> Any:
    """One of FSDP2's names (``fully_shard``, ``MixedPrecisionPolicy``, ``CPUOffloadPolicy``):
    public in ``torch.distributed.fsdp`` from torch 2.6, under
    ``torch.distributed._composable.fsdp`` in torch 2.5."""
    import torch.distributed.fsdp as public

    if hasattr(public, name):
        return getattr(public, name)
    import torch.distributed._composable.fsdp as torch_2_5

    return getattr(torch_2_5, name)


def fsdp_options(
    strategy: str,
    device_type: str,
    world_size: int,
    *,
    hsdp_shard_size: int | None = None,
    cpu_offload: bool = False,
) -> dict[str, Any]:
    """The ``fully_shard`` keywords beyond the precision policy: ``mesh`` for HSDP, and
    ``offload_policy=CPUOffloadPolicy(...)`` for CPU offload.

    CPU offload keeps the sharded parameters, gradients and optimizer state in host memory
    and runs the optimizer step there; memory is pinned only where an accelerator exists. On
    a CPU-only machine the parameters already live there, so it changes where nothing moves
    and gives the same result as without it.
    """
    options: dict[str, Any] = {}
    if strategy == "hsdp":
        options["mesh"] = hsdp_mesh(device_type, world_size, hsdp_shard_size)
    if cpu_offload:
        offload = fsdp2_name("CPUOffloadPolicy")
        options["offload_policy"] = offload(pin_memory=device_type != "cpu")
    return options


def setting_notes(
    strategy: str,
    *,
    distributed: bool,
    sharded_before: bool,
    hsdp_shard_size: int | None = None,
    cpu_offload: bool = False,
) -> list[str]:
    """Notes for ``FitResult.notes`` on sharding settings that did nothing in this run: a
    model the caller had already sharded (not wrapped again), or HSDP / CPU offload in a
    single process (nothing to shard over)."""
    if sharded_before and strategy not in ("none", "auto"):
        return [
            f"strategy={strategy!r}: the model was already sharded with fully_shard (DTensor "
            "parameters), so it was used as it is and not wrapped again"
        ]
    if distributed or strategy not in ("fsdp", "hsdp"):
        return []
    asked = [f"strategy={strategy!r}"]
    asked += [f"hsdp_shard_size={hsdp_shard_size}"] if hsdp_shard_size is not None else []
    asked += ["cpu_offload=True"] if cpu_offload else []
    return [
        f"{', '.join(asked)}: a single process has nothing to shard over, so the model trains "
        "unsharded (launch with torchrun to shard it)"
    ]
