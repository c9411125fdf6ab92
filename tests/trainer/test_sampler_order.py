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
