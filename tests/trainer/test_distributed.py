"""MixedPrecision under DDP: two gloo processes on loopback, with hard timeouts."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from gloo_group import gloo_group
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from ampkit import MixedPrecision

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(180)]

WORLD = 2
STEPS, ACCUM, GLOBAL_BATCH = 4, 2, 16


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def global_batch(step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step * 100 + micro)
    return torch.randn(GLOBAL_BATCH, 16, generator=g), torch.randint(
        0, 4, (GLOBAL_BATCH,), generator=g
    )


def train(model, engine, rank: int, world: int, inject_inf_on: int | None = None):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    results = []
    for step in range(STEPS):
        for micro in range(ACCUM):
            x, y = global_batch(step, micro)
            per_rank = GLOBAL_BATCH // world
            x, y = (
                x[rank * per_rank : (rank + 1) * per_rank],
                y[rank * per_rank : (rank + 1) * per_rank],
            )
            with engine.accumulate(model):
                with engine.autocast():
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                engine.backward(loss)
            if inject_inf_on == rank and step == 1 and micro == ACCUM - 1:
                next(model.parameters()).grad[0, 0] = (
                    math.inf
                )  # after the all-reduce: this rank only
            result = engine.step(opt)
        results.append(result.skipped)
    return results


def _worker(rank: int, store: str, out: str, precision: str) -> None:
    with gloo_group(rank, WORLD, store):
        warnings.simplefilter("ignore")
        model = DDP(make_model())
        calls = []

        def counting_hook(state, bucket):
            calls.append(1)
            return allreduce_hook(state, bucket)

        model.register_comm_hook(None, counting_hook)
        engine = MixedPrecision(precision, "cpu", grad_accum_steps=ACCUM)
        skipped = train(
            model, engine, rank, WORLD, inject_inf_on=1 if precision == "fp16" else None
        )
        torch.save(
            {
                "state": model.module.state_dict(),
                "skipped": skipped,
                "allreduces": len(calls),
                "stats": engine.stats,
            },
            Path(out) / f"rank{rank}.pt",
        )


def run_ddp(tmp_path: Path, precision: str) -> list[dict]:
    mp.spawn(
        _worker, args=(str(tmp_path / "store"), str(tmp_path), precision), nprocs=WORLD, join=True
    )
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def test_ddp_equals_single_process_on_global_batch_and_skips_allreduce_on_non_final(tmp_path):
    ranks = run_ddp(tmp_path, "fp32")
    single = make_model()
    train(single, MixedPrecision("fp32", "cpu", grad_accum_steps=ACCUM), rank=0, world=1)
    for rank in ranks:
        for name, tensor in single.state_dict().items():
            torch.testing.assert_close(rank["state"][name], tensor, rtol=1.3e-6, atol=5e-5)
        # one all-reduce per optimizer step (one bucket), none on the non-final micro-batches
        assert rank["allreduces"] == STEPS


def test_inf_on_one_rank_skips_the_step_on_every_rank(tmp_path):
    ranks = run_ddp(tmp_path, "fp16")
    assert ranks[0]["skipped"] == ranks[1]["skipped"] == [False, True, False, False]
    assert ranks[0]["stats"] == ranks[1]["stats"]
    for name, tensor in ranks[0]["state"].items():
        assert torch.equal(tensor, ranks[1]["state"][name]), name


def test_fsdp2_api_is_the_public_one_and_falls_back_to_torch_2_5s_path(monkeypatch):
    import torch.distributed.fsdp as public

    from ampkit.trainer.distributed import fsdp2_api

    assert fsdp2_api() == (public.fully_shard, public.MixedPrecisionPolicy)
    # torch 2.5 has FSDP2 only under torch.distributed._composable.fsdp (which newer torch
    # keeps, importing from the public path: load it before the public name goes away)
    import torch.distributed._composable.fsdp as torch_2_5_path

    monkeypatch.delattr(public, "fully_shard")
    assert fsdp2_api() == (torch_2_5_path.fully_shard, torch_2_5_path.MixedPrecisionPolicy)
