import torch

from ampkit._tree import to_device
from ampkit.trainer.data import ResumableSampler


def test_resumed_sampler_continues_the_same_order():
    data = list(range(50))
    whole = list(ResumableSampler(data, rank=0, world_size=1, seed=3, epoch=2))
    resumed = list(ResumableSampler(data, rank=0, world_size=1, seed=3, epoch=2, start=17))
    assert resumed == whole[17:]
    assert sorted(whole) == data
    assert whole != list(ResumableSampler(data, rank=0, world_size=1, seed=3, epoch=3))


def test_ranks_interleave_to_the_single_process_order():
    data = list(range(40))
    single = list(ResumableSampler(data, rank=0, world_size=1, seed=0, epoch=0))
    ranks = [list(ResumableSampler(data, rank=r, world_size=2, seed=0, epoch=0)) for r in range(2)]
    # per step, rank r takes the r-th of every pair: the union of a step is the single batch
    for step in range(5):
        union = sorted(ranks[0][4 * step : 4 * step + 4] + ranks[1][4 * step : 4 * step + 4])
        assert union == sorted(single[8 * step : 8 * step + 8])


def test_to_device_moves_nested_batches_and_sets_channels_last():
    batch = {"image": torch.randn(2, 3, 4, 4), "label": [torch.tensor(1), "text"]}
    moved = to_device(batch, torch.device("cpu"), channels_last=True)
    assert moved["image"].is_contiguous(memory_format=torch.channels_last)
    assert moved["label"][1] == "text" and isinstance(moved["label"], list)


def test_fsdp_policy_follows_the_ampkit_policy():
    from ampkit import resolve_precision
    from ampkit.trainer.distributed import fsdp_mixed_precision

    bf16 = fsdp_mixed_precision(resolve_precision("bf16", "cpu"))
    assert bf16.param_dtype == torch.bfloat16 and bf16.reduce_dtype == torch.float32
    fp32 = fsdp_mixed_precision(resolve_precision("fp32", "cpu"))
    assert fp32.param_dtype is None and fp32.reduce_dtype == torch.float32
