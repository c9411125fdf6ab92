"""torch.distributed set-up for ``torchrun`` launches: process group, device, DDP or FSDP2.

ampkit never starts its own launcher or communication layer: ``torchrun`` sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous address; this module joins that group
(NCCL on CUDA, gloo on CPU), wraps the model with ``DistributedDataParallel`` or FSDP2's
``fully_shard`` and tears the group down again.

Ownership: :func:`init_distributed` creates the group only when none exists, and only then
reports ``owns_group``; :func:`teardown_distributed` destroys only such a group, so a group the
caller made is never destroyed by ampkit. A group ampkit created and nobody tore down is
destroyed at interpreter exit (an ``atexit`` hook registered when it is created), which is what
torch asks of a program before it ends.
"""

from __future__ import annotations

import atexit
import datetime
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import nn

from ampkit.errors import ConfigurationError, RanksDisagreeError
from ampkit.precision import devices
from ampkit.precision.policy import Policy
from ampkit.trainer import parallel

__all__ = [
    "SHARDED_STRATEGIES",
    "STRATEGIES",
    "DistContext",
    "Strategy",
    "agree_on_end",
    "all_gather",
    "broadcast_from_main",
    "fsdp2_api",
    "fsdp_mixed_precision",
    "init_distributed",
    "launched_local_rank",
    "shard_by_dtype",
    "teardown_distributed",
    "wrap_model",
]

Strategy = Literal["auto", "none", "ddp", "fsdp", "hsdp"]
#: The values ``strategy`` accepts, in the order error messages list them.
STRATEGIES: tuple[str, ...] = ("auto", "ddp", "fsdp", "hsdp", "none")
#: The strategies that shard the model with FSDP2 (``hsdp``: over a 2-D mesh).
SHARDED_STRATEGIES: tuple[str, ...] = ("fsdp", "hsdp")


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the job.

    Attributes:
        rank, world_size, local_rank: as set by ``torchrun`` (0, 1, 0 without it).
        owns_group: this process group was created by ampkit and is destroyed by it.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that logs and writes checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """More than one process takes part."""
        return self.world_size > 1


def launched_world_size() -> int:
    """``WORLD_SIZE`` from the environment (1 when not launched by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launched_local_rank() -> int:
    """``LOCAL_RANK`` from the environment (0 when not launched by torchrun): the device this
    process uses, known before the process group is joined."""
    return int(os.environ.get("LOCAL_RANK", "0"))


#: Whether the default process group was created by ampkit and not yet destroyed.
_created = False
_exit_hook = False
#: How often this process has created the default group, and the store of the first one.
_joins = 0
_first_store: Any = None


def _rejoin_store() -> dict[str, Any]:
    """Keyword arguments for ``init_process_group`` after an earlier group was destroyed.

    torch names a new default group as it named the first one, so its rendezvous would read
    the first group's keys, still in torchrun's store: a rank may connect to an address that
    no longer listens, and the job hangs (seen about one run in three with two Trainers in a
    row). Each later group rendezvous under a prefix of its own in the first group's store
    (kept alive here); every rank joins as often as the others, so the prefixes agree.
    """
    if _joins == 0 or _first_store is None:
        return {}
    return {"store": dist.PrefixStore(f"ampkit/join-{_joins}/", _first_store)}


#: How long the exit hook lets gloo's worker threads finish with their last collective.
_TRANSPORT_GRACE_S = 0.25


def _destroy_at_exit() -> None:
    """Destroy the group ampkit created, then give gloo's worker threads the GIL for a moment.

    A model wrapped in DDP keeps the process group (and its ``pt_gloo_runloop`` threads) alive
    past ``destroy_process_group``. A worker thread that drops its last reference to a
    collective's tensors (e.g. the final ``all_gather_object`` a moment ago) must take the GIL
    to release their Python objects; once the interpreter is finalizing it cannot, the thread
    is unwound, and the process aborts ("terminate called without an active exception", seen
    in gdb as ``~AsyncAllgatherWork`` -> ``decref_pyobject`` -> ``take_gil`` ->
    ``pthread_exit`` in ``ProcessGroupGloo::runLoop``). Sleeping here, before finalization,
    releases the GIL so those threads finish. (Only processes that trained with several
    ranks: :func:`init_distributed` registers this hook only then, also when the caller owns
    the group.)
    """
    global _first_store
    if _created and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    # also after Trainer.close(), and for a group the caller made: a wrapped model may still
    # hold the group, and its threads their last collective
    time.sleep(_TRANSPORT_GRACE_S)
    _first_store = None  # release the store before the interpreter's teardown, not during it


def init_distributed(device_type: str, timeout_s: float = 600.0) -> DistContext:
    """Join the ``torchrun`` process group, or describe the one the caller already made.

    Raises:
        ConfigurationError: launched by torchrun but the environment lacks ``RANK``.
    """
    if dist.is_available() and dist.is_initialized():
        local = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
        if dist.get_world_size() > 1:
            _register_exit_hook()
        return DistContext(dist.get_rank(), dist.get_world_size(), local, owns_group=False)
    world = launched_world_size()
    if world <= 1:
        return DistContext()
    if "RANK" not in os.environ:
        raise ConfigurationError(
            f"distributed: WORLD_SIZE={world} is set but RANK is not. Launch with "
            "`torchrun --nproc_per_node=N -m ampkit train ...` (or `ampkit train --nproc N`)."
        )
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    backend = devices.distributed_backend(device_type)
    devices.set_current_device(device_type, local)
    dist.init_process_group(
        backend,
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
        **_rejoin_store(),
    )
    global _created, _joins, _first_store
    _created = True
    if _first_store is None:
        default_store = getattr(dist.distributed_c10d, "_get_default_store", None)
        _first_store = default_store() if default_store is not None else None
    _joins += 1
    _register_exit_hook()
    return DistContext(rank, world, local, owns_group=True)


def _register_exit_hook() -> None:
    global _exit_hook
    if not _exit_hook:
        atexit.register(_destroy_at_exit)
        _exit_hook = True


def teardown_distributed(ctx: DistContext, *, wait_for_all: bool = False) -> None:
    """Destroy the process group if ampkit created it (idempotent).

    ``wait_for_all`` (a run that ended normally): meet every rank at a barrier first, so no
    rank tears its connections down while a peer still has a collective in flight (gloo then
    aborts the peer at exit, "terminate called without an active exception"). Not after an
    error: a rank that died would never arrive.

    Then, with several ranks, the GIL is released for a moment (:data:`_TRANSPORT_GRACE_S`):
    gloo's worker thread takes it to drop the last collective's tensors. A DDP model freed
    right after (the Trainer going out of scope) holds the group's last reference; its
    destructor joins that thread with the GIL held, and would wait forever for a thread that
    waits for the GIL (seen in py-spy: ``~ProcessGroupGloo`` -> ``std::thread::join`` beside
    ``~AsyncAllgatherWork`` -> ``gil_scoped_acquire``).
    """
    global _created
    if ctx.owns_group and _created and dist.is_available() and dist.is_initialized():
        if wait_for_all and ctx.distributed:
            dist.barrier()
        dist.destroy_process_group()
        _created = False
    if ctx.distributed:
        time.sleep(_TRANSPORT_GRACE_S)


def all_gather(ctx: DistContext, value: Any) -> list[Any]:
    """Every rank's ``value`` (picklable), in rank order; ``[value]`` in one process."""
    if not ctx.distributed:
        return [value]
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, value)
    return gathered


def broadcast_from_main(ctx: DistContext, value: Any) -> Any:
    """Rank 0's ``value`` (picklable) on every rank; ``value`` itself in one process."""
    if not ctx.distributed:
        return value
    box = [value if ctx.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def ranks_listed(ranks: list[int]) -> str:
    """``rank 1``, ``ranks 1, 3`` or ``ranks 1, 2, 3 and 5 more``."""
    shown = ", ".join(str(r) for r in ranks[:4])
    more = f" and {len(ranks) - 4} more" if len(ranks) > 4 else ""
    return f"rank{'s' if len(ranks) > 1 else ''} {shown}{more}"


def agree_on_end(ctx: DistContext, step: int) -> None:
    """Check that every rank reached the same optimizer step at the end of training.

    Raises:
        RanksDisagreeError: on every rank alike, naming the ranks and the steps they reached.
    """
    steps = all_gather(ctx, step)
    if len(set(steps)) <= 1:
        return
    by_step: dict[int, list[int]] = {}
    for rank, reached in enumerate(steps):
        by_step.setdefault(reached, []).append(rank)
    seen = "; ".join(f"{ranks_listed(r)} at step {s}" for s, r in sorted(by_step.items()))
    raise RanksDisagreeError(
        f"training: the processes ended at different steps ({seen}), so their weights no "
        "longer agree. Every rank must get the same number of batches per step; check the "
        "data each rank is given, and resume from the last checkpoint."
    )


def fsdp2_api() -> tuple[Callable[..., Any], type]:
    """FSDP2's ``fully_shard`` and ``MixedPrecisionPolicy``
    (:func:`~ampkit.trainer.parallel.fsdp2_name`)."""
    return parallel.fsdp2_name("fully_shard"), parallel.fsdp2_name("MixedPrecisionPolicy")


def fsdp_mixed_precision(policy: Policy):  # -> torch.distributed.fsdp.MixedPrecisionPolicy
    """FSDP2's ``MixedPrecisionPolicy`` for an ampkit policy.

    Parameters are all-gathered and computed in the policy's low-precision dtype (fp32 for
    fp32); gradients are reduced in fp32, so the sharded fp32 master weights and optimizer
    state see full-precision gradients.
    """
    _, MixedPrecisionPolicy = fsdp2_api()

    low = policy.compute_dtype if policy.autocast_enabled else None
    return MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)


def _unsharded(module: nn.Module, recurse: bool) -> list[nn.Parameter]:
    """``module``'s parameters that no ``fully_shard`` group holds yet (those are DTensors)."""
    from torch.distributed.tensor import DTensor

    return [p for p in module.parameters(recurse=recurse) if not isinstance(p, DTensor)]


def _numel_by_dtype(module: nn.Module) -> dict[torch.dtype, int]:
    counts: dict[torch.dtype, int] = {}
    for p in _unsharded(module, recurse=True):
        counts[p.dtype] = counts.get(p.dtype, 0) + p.numel()
    return counts


def _check_own_dtypes(module: nn.Module, keep: torch.dtype) -> None:
    own = {p.dtype for p in _unsharded(module, recurse=False)}
    if own - {keep}:
        names = ", ".join(f"{n} ({p.dtype})" for n, p in module.named_parameters(recurse=False))
        raise ConfigurationError(
            f"strategy: FSDP2 needs one parameter dtype per sharded group, but the "
            f"{type(module).__name__} module holds parameters of several itself: {names}. "
            "Keep the whole module in one dtype (Bf16True(keep_fp32=[...])), or use strategy='ddp'."
        )


def _split_off(module: nn.Module, keep: torch.dtype, shard: Callable[[nn.Module], None]) -> None:
    """Shard every part of ``module`` whose parameters are not ``keep`` as groups of their
    own, the smallest submodules that hold one dtype, leaving the ``keep`` ones unsharded."""
    counts = _numel_by_dtype(module)
    if not counts or set(counts) == {keep}:
        return
    if keep not in counts:
        shard_by_dtype(module, shard)
        return
    for child in module.children():
        _split_off(child, keep, shard)
    _check_own_dtypes(module, keep)


def shard_by_dtype(module: nn.Module, shard: Callable[[nn.Module], None]) -> None:
    """``shard(module)`` (its ``fully_shard``) so that every FSDP2 group holds one dtype.

    FSDP2 flattens a group's parameters into one buffer and refuses mixed dtypes ("FSDP
    expects uniform original parameter dtype"). When ``module``'s unsharded parameters have
    several (bf16-true: bf16 Linears beside fp32 norms), the submodules holding the dtype with
    fewer elements are sharded first, each as its own group (the smallest submodule of one
    dtype: a LayerNorm), then ``module`` with the rest.

    Raises:
        ConfigurationError: one module holds parameters of two dtypes itself.
    """
    counts = _numel_by_dtype(module)
    if len(counts) > 1:
        keep = max(counts, key=lambda d: counts[d])
        for child in module.children():
            _split_off(child, keep, shard)
        _check_own_dtypes(module, keep)
    shard(module)


def wrap_model(
    model: nn.Module,
    strategy: Strategy,
    ctx: DistContext,
    policy: Policy,
    *,
    activation_checkpointing: Sequence[str | type[nn.Module]] = (),
    hsdp_shard_size: int | None = None,
    cpu_offload: bool = False,
) -> nn.Module:
    """Wrap ``model`` for data parallelism; the model must already be on its device.

    ``ddp``: ``DistributedDataParallel``. ``fsdp``: FSDP2 ``fully_shard`` on each block of the
    model's ``nn.ModuleList``s (transformer layers), then on the root, with
    :func:`fsdp_mixed_precision`; a model whose parameters are not all fp32 (bf16-true's bf16
    weights beside fp32 islands) is gathered in the dtypes it stores, each group of one dtype
    (:func:`shard_by_dtype`). ``hsdp``: the same over a 2-D mesh (replicate x shard,
    :func:`~ampkit.trainer.parallel.hsdp_mesh`). ``cpu_offload``: FSDP2's CPU offload policy.
    ``none`` or a single process: the model unchanged. ``activation_checkpointing`` applies to
    every strategy, before any wrapping (:mod:`ampkit.trainer.parallel`). A model the caller
    already sharded with ``fully_shard`` (DTensor parameters) is not wrapped again.
    """
    if activation_checkpointing:
        parallel.apply_activation_checkpointing(model, activation_checkpointing)
    if strategy == "none" or not ctx.distributed or parallel.is_sharded(model):
        return model
    if strategy in ("auto", "ddp"):
        from torch.nn.parallel import DistributedDataParallel

        device_ids = devices.ddp_device_ids(policy.device, ctx.local_rank)
        return DistributedDataParallel(model, device_ids=device_ids)
    if strategy in SHARDED_STRATEGIES:
        fully_shard, MixedPrecisionPolicy = fsdp2_api()
        mp_policy = fsdp_mixed_precision(policy)
        if any(p.dtype != torch.float32 for p in model.parameters()):  # bf16-true: as stored
            mp_policy = MixedPrecisionPolicy(param_dtype=None, reduce_dtype=torch.float32)
        options = parallel.fsdp_options(
            strategy,
            policy.device.type,
            ctx.world_size,
            hsdp_shard_size=hsdp_shard_size,
            cpu_offload=cpu_offload,
        )

        def shard(module: nn.Module) -> None:
            fully_shard(module, mp_policy=mp_policy, **options)

        for child in model.modules():
            if child is not model and isinstance(child, nn.ModuleList):
                for block in child:
                    shard_by_dtype(block, shard)
        shard_by_dtype(model, shard)
        return model
    raise ConfigurationError(
        f"strategy: {strategy!r} is unknown. Use 'auto', 'ddp', 'fsdp', 'hsdp' or 'none'."
    )
