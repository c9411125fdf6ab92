"""keep-best and early stopping (issue 33), checked against a run in closed form.

One weight ``w`` (no bias) fitted by SGD to ``y = 1`` from ``x = 1`` with the mean squared
error: ``w_t = 1 - (1 - 2 lr)^t`` from ``w_0 = 0``. Evaluated against ``y = 0.5``, the eval loss
``(w_t - 0.5)^2`` falls until ``w_t`` passes 0.5, then rises: its minimum step is known, and so
is the step where ``patience`` evaluations without a lower loss stop the run.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ampkit import CheckpointConfig, ConfigurationError, EvalConfig, LoggingConfig, Trainer

LR = 0.1


def closed_form(steps: int) -> list[float]:
    """The eval loss after each step 1..steps."""
    return [((1 - (1 - 2 * LR) ** t) - 0.5) ** 2 for t in range(1, steps + 1)]


def make(folder, *, patience=None, keep_last=1, max_steps=20, **checkpoint) -> Trainer:
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    return Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=LR),
        max_steps=max_steps,
        loss_fn=nn.functional.mse_loss,
        precision="fp32",
        device="cpu",
        checkpoint=CheckpointConfig(folder, every=1, keep_last=keep_last, **checkpoint),
        eval=EvalConfig(
            every=1, data=[(torch.ones(1, 1), torch.full((1, 1), 0.5))], patience=patience
        ),
        logging=LoggingConfig(progress_bar=False),
    )


def test_keep_best_keeps_the_minimum_and_patience_stops_after_it(tmp_path):
    losses = closed_form(20)
    best = losses.index(min(losses)) + 1  # step 3: w = 0.488
    patience = 2
    trainer = make(tmp_path / "ckpt", patience=patience, keep_best="eval_loss")
    result = trainer.fit([(torch.ones(1, 1), torch.ones(1, 1))])
    assert result.steps == best + patience == 5  # stopped early, 15 steps before max_steps
    assert [e.step for e in result.eval_history] == [1, 2, 3, 4, 5]
    assert [e.loss for e in result.eval_history] == pytest.approx(losses[:5], rel=1e-5)
    kept = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert kept == [f"step-{best:08d}", "step-00000005"]  # the best, and the newest (keep_last=1)
    value, path = trainer.checkpointer.best
    assert path.name == f"step-{best:08d}" and value == pytest.approx(losses[best - 1], rel=1e-4)
    assert any(n.startswith("stopped early at step 5: 2 evaluation(s)") for n in result.notes)
    assert any(n.startswith("best eval_loss ") and n.endswith("(kept)") for n in result.notes)


def test_without_patience_the_run_trains_to_max_steps_and_keeps_the_best(tmp_path):
    trainer = make(tmp_path / "ckpt", max_steps=8, keep_best="eval_loss")
    assert trainer.fit([(torch.ones(1, 1), torch.ones(1, 1))]).steps == 8
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "step-00000003",
        "step-00000008",
    ]


def test_best_mode_max_keeps_the_highest_value(tmp_path):
    trainer = make(tmp_path / "ckpt", max_steps=6, keep_best="eval_loss", best_mode="max")
    trainer.fit([(torch.ones(1, 1), torch.ones(1, 1))])
    losses = closed_form(6)
    step = losses.index(max(losses)) + 1  # the last step here: the loss rises after step 3
    assert trainer.checkpointer.best[1].name == f"step-{step:08d}"


@pytest.mark.parametrize(
    ("checkpoint", "match"),
    [
        (dict(keep_best="loss"), "keep_best='loss' is invalid"),
        (dict(keep_best="eval_loss", best_mode="lowest"), "best_mode='lowest' is invalid"),
    ],
)
def test_bad_keep_best_settings_are_refused(tmp_path, checkpoint, match):
    with pytest.raises(ConfigurationError, match=match):
        CheckpointConfig(tmp_path, **checkpoint)


def test_keep_best_of_a_value_the_run_does_not_evaluate_is_refused(tmp_path):
    model = nn.Linear(1, 1)
    with pytest.raises(ConfigurationError, match=r"keep_best='eval_accuracy'\) names no value"):
        Trainer(
            model,
            torch.optim.SGD(model.parameters(), lr=LR),
            max_steps=1,
            checkpoint=CheckpointConfig(tmp_path, keep_best="eval_accuracy"),
            eval=EvalConfig(every=1, data=[]),
        )
    with pytest.raises(ConfigurationError, match="patience=0 is invalid|patience"):
        EvalConfig(every=1, data=[], patience=0)
