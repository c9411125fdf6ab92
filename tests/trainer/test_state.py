"""The Trainer's loop counters and their checkpoint form."""

from __future__ import annotations

import pytest

from ampkit import CheckpointError
from ampkit.trainer.state import TrainerState


def test_state_dict_round_trip():
    state = TrainerState(step=7, epoch=2, batch_in_epoch=3)
    restored = TrainerState()
    restored.load_state_dict(state.state_dict())
    assert restored == state


@pytest.mark.parametrize(
    "bad",
    [
        {"step": 1, "epoch": 0},
        {"step": 1, "epoch": 0, "batch_in_epoch": 0, "extra": 1},
        {"step": -1, "epoch": 0, "batch_in_epoch": 0},
        {"step": True, "epoch": 0, "batch_in_epoch": 0},
        {"step": 1.5, "epoch": 0, "batch_in_epoch": 0},
        [1, 0, 0],
    ],
)
def test_malformed_state_is_a_checkpoint_error_and_changes_nothing(bad):
    state = TrainerState(step=4)
    with pytest.raises(CheckpointError, match="trainer state"):
        state.load_state_dict(bad)
    assert state == TrainerState(step=4)
