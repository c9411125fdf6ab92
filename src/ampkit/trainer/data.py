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
from ampkit.precision.devices import loader_defaults

__all__ = ["ResumableSampler", "build_loader", "example_batch", "permuted"]


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
    samples in, in memory that does not grow with the dataset.

    Up to :attr:`RANDPERM_MAX` samples the indices and their order are exactly
    ``torch.utils.data.DistributedSampler``'s (without its Python list of every index, about
    40 bytes per sample): the permutation is one int32 tensor handed out a block at a time.
    Above it (a large text of overlapping windows: one sample per byte), a permutation of
    every position would take 4-8 bytes per sample, so the shuffled order is a keyed
    pseudo-random permutation computed block by block (:func:`permuted`) instead: every
    index once per epoch, the same order on every rank and after a resume, a new order each
    epoch, and no memory proportional to the dataset. Without shuffling no index list is
    built either.
    """

    _BLOCK = 1 << 16
    #: Largest dataset shuffled with ``torch.randperm`` (DistributedSampler's exact order).
    RANDPERM_MAX = 1 << 24

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
        if self.shuffle and self.size <= self.RANDPERM_MAX:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=generator, dtype=torch.int32)
            mine = order[: self.num_samples * self.world_size][self.rank :: self.world_size]
            for block in mine[self.start :].split(self._BLOCK):
                yield from block.tolist()
            return
        keys = _feistel_keys(self.seed + self.epoch) if self.shuffle else None
        for first in range(self.start, self.num_samples, self._BLOCK):
            count = min(self._BLOCK, self.num_samples - first)
            # position p of this rank's share is global position rank + world_size * p
            positions = self.rank + self.world_size * torch.arange(
                first, first + count, dtype=torch.int64
            )
            yield from (
                positions if keys is None else permuted(positions, self.size, keys)
            ).tolist()

    def __len__(self) -> int:
        return max(0, self.num_samples - self.start)


_ROUNDS = 4
_MULTIPLIERS = (0x5851F42D, 0x2545F491, 0x27BB2EE6, 0x165667B1)


def _feistel_keys(seed: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2**31 - 1, (_ROUNDS,), generator=generator).tolist()


def _encrypt(x: torch.Tensor, half: int, keys: list[int]) -> torch.Tensor:
    mask = (1 << half) - 1
    left, right = x >> half, x & mask
    for key, multiplier in zip(keys, _MULTIPLIERS, strict=True):
        mixed = (right * multiplier + key) & 0x7FFFFFFF  # int64 arithmetic, kept non-negative
        mixed = ((mixed ^ (mixed >> 15)) * 0x2C1B3C6D) & 0x7FFFFFFF
        left, right = right, left ^ ((mixed ^ (mixed >> 13)) & mask)
    return (left << half) | right


def permuted(positions: torch.Tensor, size: int, keys: list[int]) -> torch.Tensor:
    """Where ``positions`` (int64 values in ``[0, size)``) go under the keyed permutation of
    ``range(size)``: a balanced Feistel network over the smallest even number of bits that
    holds ``size``, cycle-walked back into range (so the map is a bijection of
    ``range(size)``), evaluated elementwise: memory is that of ``positions``, not of ``size``.
    """
    if size <= 1:
        return positions.clone()
    half = max(1, ((size - 1).bit_length() + 1) // 2)
    if 2 * half > 62:
        raise ConfigurationError(f"ResumableSampler: {size} samples is more than 2**62.")
    out = _encrypt(positions, half, keys)
    outside = out >= size
    while bool(outside.any()):  # cycle-walking: at most a few rounds (domain < 4 * size)
        out[outside] = _encrypt(out[outside], half, keys)
        outside = out >= size
    return out


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
    on_cuda, default_workers = loader_defaults(device, os.cpu_count() or 2)
    if num_workers is None:
        num_workers = default_workers
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
