"""Trainer(epochs=...): the step count derived from the data, the loop that keeps to it, the
scheduler that reads it, and a resume that stops at the same step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ampkit import Callback, CheckpointConfig, ConfigurationError, LoggingConfig, Trainer
from ampkit.trainer.data import ResumableSampler


class Indexed(torch.utils.data.Dataset):
    """Sample i is (features of i, label of i, i): the index shows which samples were drawn."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(1)
        self.x, self.y = torch.randn(n, 12, generator=g), torch.randint(0, 3, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return {"x": self.x[i], "labels": self.y[i], "index": torch.tensor(i)}


class Recording(nn.Module):
    """A classifier that returns its loss and records the sample indices of each batch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.Linear(16, 3))
        self.seen: list[list[int]] = []

    def forward(self, x, labels, index):
        if self.training:
            self.seen.append(index.tolist())
        logits = self.net(x)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


class CountSteps(torch.optim.SGD):
    def __init__(self, params) -> None:
        super().__init__(params, lr=0.05)
        self.calls = 0

    def step(self, closure=None):
        self.calls += 1
        return super().step(closure)


def make(model, **kwargs) -> Trainer:
    options = dict(precision="fp32", device="cpu", batch_size=4)
    options.update(kwargs)
    return Trainer(model, CountSteps(model.parameters()), **options)


@pytest.mark.parametrize(
    ("kwargs", "given"), [({}, "neither"), ({"max_steps": 4, "epochs": 2}, "both")]
)
def test_exactly_one_of_max_steps_and_epochs(kwargs, given):
    with pytest.raises(ConfigurationError, match=f"got {given} of max_steps and epochs"):
        make(Recording(), **kwargs)


def test_epochs_must_be_a_count():
    with pytest.raises(ConfigurationError, match="epochs=0 is invalid"):
        make(Recording(), epochs=0)


def test_step_count_is_read_before_fit_only_from_max_steps_or_steps_for():
    assert make(Recording(), max_steps=7).num_training_steps == 7
    trainer = make(Recording(), epochs=3, grad_accum_steps=2)
    with pytest.raises(ConfigurationError, match="fit\\(\\) has not seen yet"):
        trainer.num_training_steps  # noqa: B018
    # 22 samples // 1 process // batch 4 = 5 micro-batches an epoch; 3 * 5 // 2 = 7 steps
    assert trainer.steps_for(Indexed(22)) == 7


def test_epochs_run_takes_the_derived_steps_and_advances_the_sampler_epoch():
    model, data = Recording(), Indexed(22)  # 5 batches of 4 per epoch, 2 samples dropped
    seen_by_scheduler = []

    def schedule(optimizer):
        seen_by_scheduler.append(trainer.num_training_steps)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)

    trainer = make(model, epochs=3, grad_accum_steps=2, scheduler=schedule)
    result = trainer.fit(data)
    assert result.steps == 7 == trainer.optimizer.calls == trainer.max_steps
    assert seen_by_scheduler == [7]
    # 14 micro-batches: epoch 0 and 1 whole, 4 of epoch 2 (the 15th cannot fill a window)
    assert len(model.seen) == 14
    orders = [list(ResumableSampler(data, rank=0, world_size=1, seed=0, epoch=e)) for e in range(3)]
    drawn = [sample for batch in model.seen for sample in batch]
    assert drawn == orders[0][:20] + orders[1][:20] + orders[2][:16]
    assert orders[0][:20] != orders[1][:20]  # a new shuffle each epoch
    assert (trainer.state.epoch, trainer.state.batch_in_epoch) == (2, 4)


def test_epochs_over_a_dataloader_use_its_length():
    data = Indexed(24)
    loader = torch.utils.data.DataLoader(data, batch_size=6)  # 4 batches
    model = Recording()
    result = make(model, epochs=2, grad_accum_steps=3).fit(loader)
    assert result.steps == 2  # 2 * 4 // 3
    assert len(model.seen) == 6


def test_linear_warmup_schedule_reaches_zero_at_the_last_step(tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    rows = []

    class Rows(Callback):
        def on_log(self, trainer, metrics):
            rows.append((metrics.step, metrics.lr))

    model = Recording()
    trainer = make(
        model,
        epochs=2,
        grad_accum_steps=2,
        scheduler=lambda opt: transformers.get_linear_schedule_with_warmup(
            opt, 2, trainer.num_training_steps
        ),
        logging=LoggingConfig(log_every=1),
        callbacks=[Rows()],
    )
    trainer.fit(Indexed(32))  # 8 batches an epoch: 8 steps
    assert [step for step, _ in rows] == list(range(1, 9))
    # warm-up to 0.05 over 2 steps, then linear to 0 at step 8 (lr after each step)
    expected = [0.05 * s / 2 if s < 2 else 0.05 * (8 - s) / 6 for s in range(1, 9)]
    assert [lr for _, lr in rows] == pytest.approx(expected, abs=1e-12)
    assert rows[-1][1] == 0.0


def test_data_without_length_or_too_short_for_a_window_is_refused():
    batches = (b for b in [{"x": torch.zeros(1, 12)}])
    with pytest.raises(ConfigurationError, match="needs the length of the training data"):
        make(Recording(), epochs=1).fit(batches)
    with pytest.raises(ConfigurationError, match="do not fill one accumulation window"):
        make(Recording(), epochs=1, grad_accum_steps=4).fit(Indexed(12))  # 3 batches


class Crash(Callback):
    def on_step_end(self, trainer, result):
        if trainer.step == 3:
            raise KeyboardInterrupt


def test_a_resumed_epochs_run_stops_at_the_same_step_with_the_same_weights(tmp_path):
    data = Indexed(22)
    straight = Recording()
    expected = make(straight, epochs=3, grad_accum_steps=2).fit(data)

    with pytest.raises(KeyboardInterrupt):
        make(
            Recording(),
            epochs=3,
            grad_accum_steps=2,
            checkpoint=CheckpointConfig(tmp_path, every=2),
            callbacks=[Crash()],
        ).fit(data)
    resumed = Recording()
    trainer = make(
        resumed, epochs=3, grad_accum_steps=2, checkpoint=CheckpointConfig(tmp_path, resume="auto")
    )
    result = trainer.fit(data)
    assert result.resumed_from.endswith("step-00000002")
    assert trainer.step == expected.steps == 7 and trainer.optimizer.calls == 7 - 2
    assert len(resumed.seen) == 2 * (7 - 2)
    for a, b in zip(resumed.parameters(), straight.parameters(), strict=True):
        assert torch.equal(a, b)
