"""Trainer: the loop, its conventions, control runs and bad input."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch import nn

import ampkit
from ampkit import (
    CheckpointConfig,
    CheckpointError,
    ConfigurationError,
    DistributedConfig,
    EvalConfig,
    LoggingConfig,
    Trainer,
)
from ampkit.trainer.data import ResumableSampler


def dataset(n: int = 64) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(
        torch.randn(n, 12, generator=g), torch.randint(0, 3, (n,), generator=g)
    )


def mlp(seed: int = 0, width: int = 32) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, width), nn.GELU(), nn.Linear(width, 3))


def make(model=None, **kwargs) -> Trainer:
    model = model or mlp()
    options = dict(
        loss_fn=nn.functional.cross_entropy,
        max_steps=8,
        precision="fp32",
        device="cpu",
        batch_size=8,
    )
    options.update(kwargs)
    return Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-2), **options)


def test_fit_trains_and_writes_metrics(tmp_path):
    trainer = make(
        max_steps=16, logging=LoggingConfig(log_every=4, metrics_file=tmp_path / "m.jsonl")
    )
    result = trainer.fit(dataset())
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [4, 8, 12, 16]
    assert rows[-1]["loss"] < rows[0]["loss"]
    assert result.steps == 16 and result.skipped_steps == 0 and result.precision == "fp32"
    assert result.samples_per_s > 0 and result.tokens_per_s is None


def test_trainer_adds_nothing_to_the_hand_written_fp32_loop():
    data = dataset(96)  # 12 batches of 8: one epoch for 6 steps of 2 micro-batches
    trainer_model = mlp()
    make(trainer_model, max_steps=6, grad_accum_steps=2, max_grad_norm=0.5).fit(data)

    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = torch.utils.data.DataLoader(
        data,
        batch_size=8,
        drop_last=True,
        sampler=ResumableSampler(data, rank=0, world_size=1, seed=0, epoch=0),
    )
    batches = iter(loader)
    for _ in range(6):
        for _ in range(2):
            x, y = next(batches)
            (nn.functional.cross_entropy(model(x), y) / 2).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        opt.zero_grad(set_to_none=True)
    for a, b in zip(trainer_model.parameters(), model.parameters(), strict=True):
        assert torch.equal(a, b)


class ReturnsLoss(nn.Module):
    def __init__(self, style: str) -> None:
        super().__init__()
        self.net, self.style = mlp(), style

    def forward(self, x, y):
        loss = nn.functional.cross_entropy(self.net(x), y)
        if self.style == "tuple":
            return self.net(x), loss
        if self.style == "dict":
            return {"logits": self.net(x), "loss": loss}
        if self.style == "object":
            return type("Output", (), {"loss": loss})()
        return loss


@pytest.mark.parametrize("style", ["tensor", "tuple", "dict", "object"])
def test_model_that_returns_its_loss(style):
    model = ReturnsLoss(style)
    result = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        max_steps=3,
        precision="fp32",
        device="cpu",
        batch_size=8,
    ).fit(dataset())
    assert result.steps == 3


def test_model_without_loss_is_a_clear_error():
    model = mlp()
    trainer = Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        max_steps=2,
        precision="fp32",
        device="cpu",
        batch_size=8,
    )
    with pytest.raises(ConfigurationError, match="holds no scalar loss"):
        trainer.fit([(torch.randn(4, 12),)])


def test_user_iterable_of_batches():
    batches = [(torch.randn(4, 12), torch.randint(0, 3, (4,))) for _ in range(5)]
    result = make(max_steps=12).fit(batches)  # several passes over the list
    assert result.steps == 12


def test_keep_last_and_final_checkpoint(tmp_path):
    trainer = make(max_steps=10, checkpoint=CheckpointConfig(tmp_path, every=3, keep_last=2))
    result = trainer.fit(dataset())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000009", "step-00000010"]
    assert result.checkpoints[-1].endswith("step-00000010")


def test_resume_auto_without_checkpoint_starts_fresh_and_says_so(tmp_path):
    result = make(max_steps=2, checkpoint=CheckpointConfig(tmp_path, resume="auto")).fit(dataset())
    assert result.resumed_from is None
    assert any("starting fresh" in note for note in result.notes)


def test_resume_continues_to_the_same_weights_in_process(tmp_path):
    straight = mlp()
    make(straight, max_steps=8).fit(dataset())
    first = mlp()
    make(first, max_steps=5, checkpoint=CheckpointConfig(tmp_path, every=5)).fit(dataset())
    resumed = mlp(seed=7)  # different initial weights: all must come from the checkpoint
    result = make(resumed, max_steps=8, checkpoint=CheckpointConfig(tmp_path, resume="auto")).fit(
        dataset()
    )
    assert result.resumed_from.endswith("step-00000005")
    assert result.steps == 8  # the whole run's steps, those before the resume included
    for a, b in zip(resumed.parameters(), straight.parameters(), strict=True):
        assert torch.equal(a, b)


def test_checkpoint_from_another_shape_is_refused_before_training(tmp_path):
    make(max_steps=2, checkpoint=CheckpointConfig(tmp_path, every=2)).fit(dataset())
    before = sorted(p.name for p in tmp_path.iterdir())
    wide = mlp(width=48)
    weights = [p.detach().clone() for p in wide.parameters()]
    with pytest.raises(CheckpointError, match="another shape"):
        make(wide, max_steps=4, checkpoint=CheckpointConfig(tmp_path, resume="auto")).fit(dataset())
    assert all(torch.equal(a, b) for a, b in zip(wide.parameters(), weights, strict=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing lost


def test_fresh_run_refuses_a_folder_with_checkpoints(tmp_path):
    make(max_steps=2, checkpoint=CheckpointConfig(tmp_path, every=2)).fit(dataset())
    with pytest.raises(ConfigurationError, match="already holds checkpoints"):
        make(max_steps=2, checkpoint=CheckpointConfig(tmp_path)).fit(dataset())


def test_fresh_run_refuses_to_overwrite_metrics(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(ConfigurationError, match="already holds"):
        make(max_steps=2, logging=LoggingConfig(metrics_file=tmp_path / "m.jsonl")).fit(dataset())
    assert (tmp_path / "m.jsonl").read_text() == '{"step": 1}\n'


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_steps": 0}, ConfigurationError, "max_steps"),
        ({"grad_accum_steps": 0}, ConfigurationError, "grad_accum_steps"),
        ({"batch_size": 0}, ConfigurationError, "batch_size"),
        ({"precision": "fp4"}, ConfigurationError, "Accepted"),
        ({"checkpoint": "ckpt"}, ConfigurationError, "checkpoint= takes a CheckpointConfig"),
        ({"logging": {"log_every": 2}}, ConfigurationError, "logging= takes a LoggingConfig"),
    ],
)
def test_bad_settings_raise_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        make(**kwargs)


@pytest.mark.parametrize(
    ("make_config", "match"),
    [
        (lambda: CheckpointConfig("c", every=0), "every=0 is invalid"),
        (lambda: CheckpointConfig("c", keep_last=True), "keep_last=True is invalid"),
        (lambda: CheckpointConfig("c", layout="zip"), "layout='zip' is unknown"),
        (lambda: CheckpointConfig("c", layout="full", async_save=True), "needs layout='sharded'"),
        (lambda: CheckpointConfig(""), "dir=''"),
        (lambda: DistributedConfig(strategy="bogus"), "strategy='bogus' is unknown"),
        (lambda: DistributedConfig(timeout_s=0), "timeout_s=0"),
        (lambda: LoggingConfig(log_every=True), "log_every=True"),
        (lambda: LoggingConfig(tokens_per_sample=0), "tokens_per_sample=0"),
        (lambda: ampkit.CompileConfig(enabled="yes"), "enabled='yes'"),
    ],
)
def test_bad_config_values_raise_when_the_config_is_made(make_config, match):
    with pytest.raises(ConfigurationError, match=match):
        make_config()


def test_missing_resume_path_raises(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        CheckpointConfig(tmp_path, resume=tmp_path / "step-00000042")


def test_lbfgs_under_fp16_is_refused():
    model = mlp()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ampkit.PrecisionWarning)
        with pytest.raises(ConfigurationError, match="LBFGS"):
            Trainer(
                model,
                torch.optim.LBFGS(model.parameters()),
                max_steps=2,
                precision="fp16",
                device="cpu",
            )


def test_fsdp_needs_an_optimizer_factory():
    model = mlp()
    with pytest.raises(ConfigurationError, match="factory"):
        Trainer(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            max_steps=2,
            distributed=DistributedConfig(strategy="fsdp"),
            precision="fp32",
            device="cpu",
        )


def test_callbacks_see_every_step_and_log():
    class Recorder(ampkit.Callback):
        def __init__(self):
            self.events = []

        def on_fit_start(self, trainer):
            self.events.append("start")

        def on_step_end(self, trainer, result):
            self.events.append(f"step{trainer.step}")

        def on_log(self, trainer, metrics):
            self.events.append(f"log{metrics.step}")

        def on_fit_end(self, trainer, result):
            self.events.append("end")

        def close(self):
            self.events.append("close")

    recorder = Recorder()
    make(max_steps=4, logging=LoggingConfig(log_every=2), callbacks=[recorder]).fit(dataset())
    assert recorder.events == [
        *("start", "step1", "step2", "log2", "step3", "step4", "log4", "end", "close")
    ]


def test_a_failing_step_reaches_on_exception_then_close_and_is_reraised():
    class Boom(ampkit.Callback):
        def __init__(self):
            self.events = []

        def on_step_end(self, trainer, result):
            if trainer.step == 2:
                raise RuntimeError("boom at step 2")

        def on_fit_end(self, trainer, result):
            self.events.append("end")

        def on_exception(self, trainer, error):
            self.events.append(f"exception:{error}")

        def close(self):
            self.events.append("close")

    boom = Boom()
    with pytest.raises(RuntimeError, match="boom at step 2"):
        make(max_steps=4, callbacks=[boom]).fit(dataset())
    assert boom.events == ["exception:boom at step 2", "close"]


def test_dict_batches_count_their_leading_dimension_as_samples():
    class DictModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(12, 3)

        def forward(self, x, y):
            return {"loss": nn.functional.cross_entropy(self.lin(x), y)}

    batches = [{"x": torch.randn(8, 12), "y": torch.randint(0, 3, (8,))} for _ in range(4)]
    seen = []

    class Rows(ampkit.Callback):
        def on_log(self, trainer, metrics):
            seen.append(metrics.samples_per_s * metrics.step_time_ms / 1000)

    model = DictModel()
    Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        max_steps=4,
        precision="fp32",
        device="cpu",
        logging=LoggingConfig(log_every=1),
        callbacks=[Rows()],
    ).fit(batches)
    assert seen == pytest.approx([8.0] * 4)  # samples per step = the batch's leading dimension


def test_predict_returns_fp32_in_inference_mode_and_restores_mode():
    model = mlp()
    model.train()
    out = ampkit.predict(model, torch.randn(5, 12), precision="bf16", device="cpu")
    assert out.dtype == torch.float32 and out.shape == (5, 3) and not out.requires_grad
    assert model.training
    expected = model(torch.zeros(1, 12))
    got = ampkit.predict(model, torch.zeros(1, 12), precision="fp32", device="cpu")
    torch.testing.assert_close(got, expected.detach(), rtol=0, atol=0)


@pytest.mark.slow
def test_compile_trains_without_graph_breaks():
    from torch._dynamo.utils import counters

    from ampkit.models.gpt import GPT, GPTConfig

    counters.clear()
    torch.manual_seed(0)
    config = GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=32)
    tokens = torch.randint(0, 256, (64, 17))
    data = torch.utils.data.TensorDataset(tokens[:, :-1], tokens[:, 1:])

    def run(compile_: bool) -> float:
        torch.manual_seed(0)
        model = GPT(config)
        trainer = Trainer(
            model,
            torch.optim.AdamW(model.parameters(), lr=1e-3),
            max_steps=3,
            precision="bf16",
            device="cpu",
            batch_size=8,
            compile=compile_,
            max_grad_norm=1.0,
            logging=LoggingConfig(log_every=3),
        )
        return trainer.fit(data).final_loss

    compiled, eager = run(True), run(False)
    assert counters["graph_break"] == {}  # the scaler's step stays outside the compiled region
    assert compiled == pytest.approx(eager, rel=2e-2)


def test_resume_keeps_metric_rows_up_to_the_checkpoint(tmp_path):
    metrics = tmp_path / "m.jsonl"
    make(
        max_steps=4,
        checkpoint=CheckpointConfig(tmp_path / "c", every=2),
        logging=LoggingConfig(log_every=1, metrics_file=metrics),
    ).fit(dataset())
    # pretend the run crashed after step 4's checkpoint... by resuming from step 2
    import shutil

    shutil.rmtree(tmp_path / "c" / "step-00000004")
    make(
        max_steps=5,
        checkpoint=CheckpointConfig(tmp_path / "c", resume="auto"),
        logging=LoggingConfig(log_every=1, metrics_file=metrics),
    ).fit(dataset())
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5]


def test_keep_fp32_runs_named_modules_in_fp32_under_autocast():
    model = mlp()
    seen = {}

    def record(name):
        def hook(module, inputs, output):
            seen.setdefault(name, output.dtype)

        return hook

    model[2].register_forward_hook(record("head"))
    model[0].register_forward_hook(record("first"))
    make(model, max_steps=1, precision="bf16", keep_fp32=["2"]).fit(dataset())
    assert seen == {"head": torch.float32, "first": torch.bfloat16}


def test_keep_fp32_unknown_name_fails_before_training():
    with pytest.raises(ConfigurationError, match="'3' is not a module"):
        make(keep_fp32=["3"])


def test_nonfinite_monitor_stops_at_the_step_and_names_the_module():
    from ampkit.callbacks import NonFiniteMonitor

    class BreaksAtStep3(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.calls = mlp(), 0

        def forward(self, x):
            self.calls += 1
            out = self.body(x)
            return out / 0.0 if self.calls == 3 else out

    monitor = NonFiniteMonitor(strict=True)
    trainer = make(BreaksAtStep3(), max_steps=6, callbacks=[monitor])
    with pytest.raises(ampkit.NonFiniteError, match="forward"):
        trainer.fit(dataset())
    assert trainer.step == 2  # steps 1 and 2 finished; step 3 produced the inf
    assert monitor.first is not None and monitor.first.phase == "forward"
    assert "body" not in monitor.first.module  # the division is in the root module's forward


# -- evaluation every N steps, the default progress bar ---------------------------------------


def _dropout_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.Dropout(0.3), nn.GELU(), nn.Linear(32, 3))


def test_eval_every_logs_eval_loss_and_leaves_training_bitwise_the_same(tmp_path):
    eval_loader = torch.utils.data.DataLoader(dataset(32), batch_size=8, shuffle=True)
    with_eval = _dropout_mlp()
    trainer = make(
        with_eval,
        max_steps=6,
        logging=LoggingConfig(log_every=3, metrics_file=tmp_path / "m.jsonl"),
        eval=EvalConfig(every=2, data=eval_loader),
    )
    trainer.fit(dataset())
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 3, 4, 6]
    assert ["eval_loss" in r for r in rows] == [True, False, True, True]
    assert all(r["eval_loss"] > 0 for r in rows if "eval_loss" in r)

    without = _dropout_mlp()
    make(without, max_steps=6).fit(dataset())  # same dropout masks: eval drew no training RNG
    for a, b in zip(with_eval.parameters(), without.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("every", "data", "match"),
    [
        (2, None, "data=NoneType is not iterable"),
        (0, [(torch.ones(1, 12), torch.zeros(1).long())], "every=0 is invalid"),
    ],
)
def test_eval_config_needs_an_interval_and_batches(every, data, match):
    with pytest.raises(ConfigurationError, match=match):
        EvalConfig(every=every, data=data)


def test_progress_bar_is_shown_by_default_only_in_a_terminal(monkeypatch):
    from ampkit.callbacks import ProgressBar

    def bars(trainer: Trainer) -> int:
        return sum(isinstance(c, ProgressBar) for c in trainer.callbacks)

    assert bars(make()) == 0  # pytest's stderr is not a terminal
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    assert bars(make()) == 1
    assert bars(make(callbacks=[ProgressBar()])) == 1  # the user's own bar, not a second one
    assert bars(make(logging=LoggingConfig(progress_bar=False))) == 0


# -- lifecycle: close() and the context manager ------------------------------------------------


def test_save_checkpoint_after_fit_then_close_is_idempotent(tmp_path):
    trainer = make(max_steps=3, checkpoint=CheckpointConfig(tmp_path, every=2))
    trainer.fit(dataset())
    assert trainer.save_checkpoint() is None  # step 3 was checkpointed at the end of fit
    trainer.close()
    trainer.close()  # a second close does nothing
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["step-00000002", "step-00000003"]
    with pytest.raises(ConfigurationError, match="was closed"):
        trainer.save_checkpoint()
    with pytest.raises(ConfigurationError, match="was closed"):
        trainer.fit(dataset())


def test_the_context_manager_closes_the_trainer_even_when_fit_raises():
    with make(max_steps=2) as trainer:
        assert trainer.fit(dataset()).steps == 2
    with pytest.raises(ConfigurationError, match="was closed"):
        trainer.evaluate([(torch.randn(2, 12), torch.zeros(2).long())])
    with pytest.raises(RuntimeError, match="boom"), make(max_steps=2) as failing:
        raise RuntimeError("boom")
    with pytest.raises(ConfigurationError, match="was closed"):
        failing.fit(dataset())


def test_close_leaves_a_process_group_the_caller_made(tmp_path):
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1
    )
    try:
        with make(max_steps=1) as trainer:
            trainer.fit(dataset())
            assert not trainer.dist.owns_group
        assert dist.is_initialized()  # the caller's group outlives the Trainer
    finally:
        dist.destroy_process_group()
