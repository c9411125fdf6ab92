"""Preemption (issue 21): with ``handle_signals=True`` a signal finishes the optimizer step,
writes a checkpoint of it and raises TrainingInterrupted; resuming it is bitwise equal to an
uninterrupted run; a second signal while saving ends the process at once and corrupts
nothing; a run that committed no checkpoint resumes as a fresh start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from torch import nn

from ampkit import CheckpointConfig, LoggingConfig, Trainer, TrainingInterrupted
from ampkit.callbacks import Callback
from ampkit.checkpoint.folder import find_checkpoints, verify_checkpoint
from ampkit.trainer.preemption import STOP_SIGNALS, StopSignals

pytestmark = pytest.mark.timeout(300)


class SignalAt(Callback):
    """Sends this process ``sig`` at the end of optimizer step ``step``."""

    def __init__(self, step: int, sig: int = signal.SIGTERM) -> None:
        self.step, self.sig = step, sig

    def on_step_end(self, trainer, result) -> None:
        if trainer.step == self.step:
            os.kill(os.getpid(), self.sig)


def make_trainer(
    ckpt: Path | None,
    *,
    max_steps=8,
    callbacks=(),
    resume="auto",
    handle_signals=True,
    every=100,
    **kwargs,
):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    checkpoint = CheckpointConfig(ckpt, every=every, resume=resume) if ckpt else None
    trainer = Trainer(
        model,
        torch.optim.AdamW(model.parameters(), lr=0.05),
        max_steps=max_steps,
        loss_fn=nn.functional.mse_loss,
        precision="fp32",
        device="cpu",
        checkpoint=checkpoint,
        callbacks=list(callbacks),
        handle_signals=handle_signals,
        **kwargs,
    )
    return trainer, model


def data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator))] * 3


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_sigterm_checkpoints_the_step_and_resume_is_bitwise_equal(tmp_path):
    straight, model = make_trainer(tmp_path / "straight")
    straight.fit(data())
    expected = weights(model)

    before = signal.getsignal(signal.SIGTERM)
    trainer, _ = make_trainer(tmp_path / "ckpt", callbacks=[SignalAt(3)])
    with pytest.raises(TrainingInterrupted) as caught:
        trainer.fit(data())
    stop = caught.value
    assert (stop.step, stop.signal, stop.exit_code) == (3, signal.SIGTERM, 143)
    assert stop.checkpoint == str(tmp_path / "ckpt" / "step-00000003")
    assert "stopped by SIGTERM at step 3" in str(stop) and "resume='auto'" in str(stop)
    assert verify_checkpoint(stop.checkpoint)["step"] == 3
    assert signal.getsignal(signal.SIGTERM) is before  # restored after fit

    resumed, model = make_trainer(tmp_path / "ckpt")
    result = resumed.fit(data())
    assert result.resumed_from == stop.checkpoint
    assert all(torch.equal(expected[k], v) for k, v in weights(model).items())


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGINT", "SIGHUP"])
def test_every_stop_signal_checkpoints_and_leaves_no_temporary_folder(tmp_path, name):
    sig = getattr(signal, name)
    trainer, _ = make_trainer(tmp_path / "ckpt", callbacks=[SignalAt(2, sig)])
    with pytest.raises(TrainingInterrupted) as caught:
        trainer.fit(data())
    assert (caught.value.step, caught.value.exit_code) == (2, 128 + sig)
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["step-00000002"]


def test_without_checkpoints_the_stop_says_what_is_lost():
    trainer, _ = make_trainer(None, callbacks=[SignalAt(2)])
    with pytest.raises(TrainingInterrupted) as caught:
        trainer.fit(data())
    assert caught.value.checkpoint is None
    assert "no checkpoint was written" in str(caught.value) and "lost" in str(caught.value)


def test_handlers_are_installed_for_fit_only_and_not_without_the_option(tmp_path):
    seen: list[object] = []

    class Look(Callback):
        def on_step_end(self, trainer, result) -> None:
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    trainer, _ = make_trainer(None, max_steps=1, callbacks=[Look()], handle_signals=False)
    trainer.fit(data())
    trainer, _ = make_trainer(None, max_steps=1, callbacks=[Look()])
    trainer.fit(data())
    assert seen[0] is before and seen[1] is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_repeat_within_the_grace_counts_once():
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # forwarded twice: still one request
        assert stop.received == signal.SIGTERM
    assert set(STOP_SIGNALS) >= {signal.SIGTERM, signal.SIGUSR1, signal.SIGINT}


def test_fit_outside_the_main_thread_trains_without_handlers(caplog):
    trainer, _ = make_trainer(None, max_steps=2)
    results = []
    thread = threading.Thread(target=lambda: results.append(trainer.fit(data())))
    thread.start()
    thread.join()
    assert results and results[0].steps == 2
    assert "outside the main thread" in caplog.text


SECOND_SIGNAL = """
import os, signal, sys, time
sys.path.insert(0, sys.argv[2])
from ampkit.checkpoint import folder
from test_preempt import SignalAt, data, make_trainer
real = folder._write_state
def slow_write(path, state):
    if "step-00000003" in str(path):  # the stop's checkpoint: a second SIGTERM mid-write
        time.sleep(2.5)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    return real(path, state)
folder._write_state = slow_write
trainer, _ = make_trainer(sys.argv[1], callbacks=[SignalAt(3)], every=2)
trainer.fit(data())
"""


@pytest.mark.slow
def test_a_second_signal_while_saving_exits_at_once_and_corrupts_nothing(tmp_path):
    straight, model = make_trainer(tmp_path / "straight")
    straight.fit(data())
    expected = weights(model)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed = subprocess.run(
        [sys.executable, "-c", SECOND_SIGNAL, str(tmp_path / "ckpt"), str(Path(__file__).parent)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert killed.returncode == -signal.SIGTERM, killed.stderr[-3000:]
    assert [info.step for info in find_checkpoints(tmp_path / "ckpt")] == [2]
    verify_checkpoint(tmp_path / "ckpt" / "step-00000002")
    resumed, model = make_trainer(tmp_path / "ckpt")
    assert resumed.fit(data()).resumed_from == str(tmp_path / "ckpt" / "step-00000002")
    assert all(torch.equal(expected[k], v) for k, v in weights(model).items())


def test_resume_auto_after_a_run_that_committed_nothing_starts_fresh(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "loss": 1.0}\n')  # a run killed before its first checkpoint
    trainer, _ = make_trainer(
        tmp_path / "ckpt", max_steps=2, logging=LoggingConfig(log_every=1, metrics_file=metrics)
    )
    result = trainer.fit(data())
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("metrics.lost-")]
    assert len(kept) == 1 and kept[0].read_text() == '{"step": 1, "loss": 1.0}\n'
    assert any("committed no checkpoint" in note and kept[0].name in note for note in result.notes)
    assert len(metrics.read_text().splitlines()) == 2  # the fresh run's own rows
