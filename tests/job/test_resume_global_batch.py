"""Resuming ``ampkit train`` on another number of processes: ``--batch-size`` may change when
processes x batch size x gradient accumulation, the global batch, stays the same (a reshard);
any other change of it is refused as before."""

from __future__ import annotations

import pytest

from ampkit import ConfigurationError, TrainConfig
from ampkit.job.resume import check_resume_config, run_record


def check(saved: TrainConfig, saved_world: int, now: TrainConfig, world: int) -> list[str]:
    return check_resume_config(
        run_record(saved, "abc"),
        now,
        data_sha256="abc",
        precision="fp32",
        saved_precision="fp32",
        checkpoint="runs/a/checkpoints/step-00000004",
        world_size=world,
        saved_world_size=saved_world,
    )


@pytest.mark.parametrize(("saved", "now"), [((2, 4), (1, 8)), ((1, 8), (4, 2)), ((4, 2), (2, 4))])
def test_same_global_batch_on_other_processes_is_allowed_and_said(saved, now):
    notes = check(
        TrainConfig(batch_size=saved[1]), saved[0], TrainConfig(batch_size=now[1]), now[0]
    )
    assert notes == [
        f"--batch-size {now[1]} on {now[0]} process(es) (was {saved[1]} on {saved[0]}): the "
        "global batch stays 8 samples per step"
    ]


def test_same_batch_size_on_other_processes_is_left_to_the_trainer():
    # allowed as before: the global batch changes, which the Trainer's resume notes
    assert check(TrainConfig(batch_size=2), 2, TrainConfig(batch_size=2), 3) == []


@pytest.mark.parametrize(
    ("saved", "now"),
    [
        ((2, 4, 1), (2, 8, 1)),  # same processes: the global batch doubles
        ((2, 2, 1), (3, 1, 1)),  # 4 samples a step before, 3 now
        ((2, 4, 1), (1, 4, 2)),  # the accumulation changes: the engine's state refuses it
    ],
)
def test_other_global_batch_is_refused(saved, now):
    with pytest.raises(ConfigurationError, match="--batch-size|--grad-accum"):
        check(
            TrainConfig(batch_size=saved[1], grad_accum=saved[2]),
            saved[0],
            TrainConfig(batch_size=now[1], grad_accum=now[2]),
            now[0],
        )
