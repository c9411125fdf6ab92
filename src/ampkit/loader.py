"""Data loading for the Trainer: a resumable, rank-aware sampler and device transfer.

The sampler's order is a pure function of ``(seed, epoch)``; rank ``r`` of ``W`` takes every
``W``-th index (as ``DistributedSampler`` does), so the samples of one step across all ranks
are exactly the samples a single process with a ``W`` times larger batch sees. Resuming
starts the same order at the saved position without touching the skipped samples.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

__all__ = ["ResumableSampler", "build_loader", "to_device"]


class ResumableSampler(Sampler[int]):
    """``DistributedSampler`` order for one epoch, starting at ``start`` samples in."""

    def __init__(
        self,
        dataset: Sized,
        *,
        rank: int,
        world_size: int,
        seed: int,
        epoch: int,
        start: int = 0,
        shuffle: bool = True,
    ) -> None:
        self._inner = DistributedSampler(
            dataset,
            num_replicas=world_size,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=True,
        )
        self._inner.set_epoch(epoch)
        self.start = start

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._inner)[self.start :])

    def __len__(self) -> int:
        return max(0, len(self._inner) - self.start)


def build_loader(
    dataset: Dataset,
    *,
    batch_size: int,
    rank: int,
    world_size: int,
    seed: int,
    epoch: int,
    start_batch: int,
    device: torch.device,
    num_workers: int | None = None,
    shuffle: bool = True,
) -> DataLoader:
    """A DataLoader with the performance defaults for ``device``.

    ``pin_memory`` on CUDA (so ``to_device`` can copy without blocking), ``num_workers``
    ``min(4, cpus // 2)`` on CUDA and 0 on CPU (worker processes would compete with the
    training threads for the same cores), incomplete last batches dropped.
    """
    on_cuda = device.type == "cuda"
    if num_workers is None:
        num_workers = min(4, (os.cpu_count() or 2) // 2) if on_cuda else 0
    sampler = ResumableSampler(
        dataset,
        rank=rank,
        world_size=world_size,
        seed=seed,
        epoch=epoch,
        start=start_batch * batch_size,
        shuffle=shuffle,
    )
    # Its own generator: creating the loader's iterator then draws no number from the global
    # RNG, so a resumed run's dropout masks match the uninterrupted run's.
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        drop_last=True,
        num_workers=num_workers,
        pin_memory=on_cuda,
        generator=generator,
    )


def to_device(batch: Any, device: torch.device, channels_last: bool = False) -> Any:
    """Move every tensor in a (nested) batch to ``device``; non-blocking from pinned memory.

    With ``channels_last``, 4-D floating-point tensors (images) get that memory format.
    """
    if isinstance(batch, torch.Tensor):
        moved = batch.to(device, non_blocking=batch.is_pinned())
        if channels_last and moved.dim() == 4 and moved.is_floating_point():
            moved = moved.contiguous(memory_format=torch.channels_last)
        return moved
    if isinstance(batch, dict):
        return {k: to_device(v, device, channels_last) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved_items = [to_device(v, device, channels_last) for v in batch]
        return type(batch)(moved_items) if isinstance(batch, list) else tuple(moved_items)
    return batch
