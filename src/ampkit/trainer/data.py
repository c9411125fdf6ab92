"""The Trainer's data path: a resumable, rank-aware loader.

Loading
-------

The sampler's order is a pure function of ``(seed, epoch)``; rank ``r`` of ``W`` takes every
``W``-th index (as ``DistributedSampler`` does), so the samples of one step across all ranks
are exactly the samples a single process with a ``W`` times larger batch sees. Resuming
starts the same order at the saved position without touching the skipped samples.

The batch convention (how a batch becomes a loss) is :mod:`ampkit.precision.batches`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sized
from typing import Any, cast

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ampkit.errors import ConfigurationError

__all__ = ["ResumableSampler", "build_loader", "example_batch"]


def example_batch(data: Any, batch_size: int | None) -> Any:
    """One batch of ``fit``'s data (for a precision mode that plans from it, fp8): the first
    ``batch_size`` samples of a Dataset (collated), or the first batch of an iterable.

    Raises:
        ConfigurationError: the data holds no batch.
    """
    if isinstance(data, torch.utils.data.Dataset) and hasattr(data, "__len__"):
        count = min(batch_size or 1, len(data))
        if count:
            return torch.utils.data.default_collate([data[i] for i in range(count)])
    else:
        for batch in data:
            return batch
    raise ConfigurationError("Trainer: the training data produced no batch to plan fp8 on.")


class ResumableSampler(Sampler[int]):
    """``DistributedSampler`` order (``drop_last=True``) for one epoch, starting at ``start``
    samples in.

    The same indices in the same order as ``torch.utils.data.DistributedSampler``, without its
    Python list of every index (about 40 bytes per sample: 10 GB for a 256 MB text of
    overlapping windows): the permutation is kept as one int32 tensor (int64 past 2**31
    samples) and handed out a block at a time.
    """

    _BLOCK = 1 << 16

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
        if not 0 <= rank < world_size:
            raise ConfigurationError(
                f"ResumableSampler: rank {rank} is outside [0, {world_size - 1}] for "
                f"world_size {world_size}."
            )
        self.size, self.rank, self.world_size = len(dataset), rank, world_size
        self.seed, self.epoch, self.start, self.shuffle = seed, epoch, start, shuffle
        self.num_samples = self.size // world_size  # drop_last: every rank gets as many

    def __iter__(self) -> Iterator[int]:
        dtype = torch.int32 if self.size < 2**31 else torch.int64
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=generator, dtype=dtype)
        else:
            order = torch.arange(self.size, dtype=dtype)
        mine = order[: self.num_samples * self.world_size][self.rank :: self.world_size]
        for block in mine[self.start :].split(self._BLOCK):
            yield from block.tolist()

    def __len__(self) -> int:
        return max(0, self.num_samples - self.start)


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
        cast(Sized, dataset),  # a map-style Dataset has __len__; torch's type lacks it
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
