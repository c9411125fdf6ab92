"""ResumableSampler hands out DistributedSampler's order without a list of every index."""

from __future__ import annotations

import pytest
from torch.utils.data import DistributedSampler

from ampkit import ConfigurationError
from ampkit.trainer.data import ResumableSampler


@pytest.mark.parametrize("size", [7, 96, 1001])
@pytest.mark.parametrize("world_size", [1, 3])
@pytest.mark.parametrize("shuffle", [True, False])
def test_same_indices_as_distributed_sampler_from_any_start(size, world_size, shuffle):
    data = range(size)
    for rank in range(world_size):
        reference = DistributedSampler(
            data, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=3, drop_last=True
        )
        reference.set_epoch(2)
        expected = list(reference)
        for start in (0, 5):
            sampler = ResumableSampler(
                data,
                rank=rank,
                world_size=world_size,
                seed=3,
                epoch=2,
                start=start,
                shuffle=shuffle,
            )
            assert list(sampler) == expected[start:] and len(sampler) == len(expected[start:])


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(ConfigurationError, match="rank 2 is outside"):
        ResumableSampler(range(4), rank=2, world_size=2, seed=0, epoch=0)


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Use the keyed permutation (meant for huge datasets) on small ones."""
    monkeypatch.setattr(ResumableSampler, "RANDPERM_MAX", 0)


@pytest.mark.parametrize("size", [1, 2, 7, 1000, 4097])
@pytest.mark.parametrize("world_size", [1, 3])
def test_keyed_order_is_a_permutation_split_across_ranks_and_resumable(keyed, size, world_size):
    shares = []
    for rank in range(world_size):
        full = list(
            ResumableSampler(range(size), rank=rank, world_size=world_size, seed=3, epoch=1)
        )
        resumed = ResumableSampler(range(size), rank=rank, world_size=world_size, seed=3, epoch=1,
                                   start=2)  # fmt: skip
        assert list(resumed) == full[2:] and len(resumed) == len(full[2:])
        shares.append(full)
    taken = [i for share in shares for i in share]
    per_rank = size // world_size
    assert all(len(share) == per_rank for share in shares)
    assert len(set(taken)) == len(taken) == per_rank * world_size  # nothing twice
    assert set(taken) <= set(range(size))
    if world_size == 1:
        assert sorted(taken) == list(range(size))  # every sample once per epoch


def test_keyed_order_is_shuffled_differently_each_epoch_and_seed(keyed):
    def order(seed: int, epoch: int) -> list[int]:
        return list(ResumableSampler(range(5000), rank=0, world_size=1, seed=seed, epoch=epoch))

    assert order(0, 0) == order(0, 0)
    assert order(0, 0) != order(0, 1) and order(0, 0) != order(1, 0)
    first = order(0, 0)
    assert first != sorted(first)
    # no long runs of neighbours: consecutive draws are rarely adjacent positions
    adjacent = sum(abs(a - b) == 1 for a, b in zip(first, first[1:], strict=False))
    assert adjacent < 50


def test_a_dataset_of_2_to_the_40_samples_starts_at_once():
    """What a huge text of overlapping windows needs: no tensor the size of the dataset."""

    class Huge:
        def __len__(self) -> int:
            return 2**40

    sampler = ResumableSampler(Huge(), rank=1, world_size=2, seed=0, epoch=0, start=10**9)
    first = [index for index, _ in zip(sampler, range(1000), strict=False)]
    assert len(set(first)) == 1000 and all(0 <= i < 2**40 for i in first)
    plain = ResumableSampler(Huge(), rank=1, world_size=2, seed=0, epoch=0, shuffle=False)
    assert [i for i, _ in zip(plain, range(3), strict=False)] == [1, 3, 5]
