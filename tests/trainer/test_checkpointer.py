"""The Checkpointer: the Trainer's checkpoints as one component, and the run lock it takes on
its folder (issue 38, item 9: two processes on one folder are refused in one line)."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from torch import nn

import ampkit
from ampkit import (
    CheckpointConfig,
    CompileConfig,
    DistributedConfig,
    EvalConfig,
    LoggingConfig,
    RunInUseError,
    Trainer,
)
from ampkit.trainer import trainer as trainer_module

HOLDER = """
import sys, time
from pathlib import Path
import torch
from torch import nn
import ampkit

class Hold(ampkit.Callback):  # inside fit, after the first checkpoint: wait for the test
    def on_checkpoint(self, trainer, path):
        if trainer.step == 1:
            Path(sys.argv[2]).write_text("holding")
            deadline = time.monotonic() + 60
            while not Path(sys.argv[3]).exists() and time.monotonic() < deadline:
                time.sleep(0.02)

torch.manual_seed(0)
model = nn.Linear(4, 1)
trainer = ampkit.Trainer(
    model, torch.optim.SGD(model.parameters(), lr=0.1), max_steps=2, precision="fp32",
    device="cpu", loss_fn=nn.functional.mse_loss, callbacks=[Hold()],
    checkpoint=ampkit.CheckpointConfig(sys.argv[1], every=1, keep_last=1, resume="auto"),
    logging=ampkit.LoggingConfig(progress_bar=False),
)
trainer.fit([(torch.ones(8, 4), torch.zeros(8, 1))] * 2)
print(trainer.step)
"""


def make(folder: Path, max_steps: int = 2, **kwargs) -> Trainer:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    return Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        max_steps=max_steps,
        precision="fp32",
        device="cpu",
        loss_fn=nn.functional.mse_loss,
        checkpoint=CheckpointConfig(folder, every=1, keep_last=1, resume="auto"),
        logging=LoggingConfig(progress_bar=False),
        **kwargs,
    )


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.ones(8, 4), torch.zeros(8, 1))] * 2


@pytest.mark.slow  # the second process imports torch: ~5 s quiet, ~30 s on a busy 2-core CPU
@pytest.mark.distributed
def test_a_second_process_on_the_checkpoint_folder_is_refused_in_one_line(tmp_path):
    ckpt, ready, go = tmp_path / "ckpt", tmp_path / "ready", tmp_path / "go"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(ckpt), str(ready), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            if holder.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"the holder did not reach its first checkpoint: {holder.stderr.read()}"
                )
            time.sleep(0.05)
        with pytest.raises(RunInUseError) as refused:
            make(ckpt).fit(batches())
        message = str(refused.value)
        assert message.startswith(
            f"CheckpointConfig.dir: {ckpt} is in use by another ampkit run (PID {holder.pid}); "
        )
        assert "\n" not in message and refused.value.pid == holder.pid
        # refused before it read, pruned or wrote anything: the holder's checkpoint is intact
        assert sorted(p.name for p in ckpt.iterdir()) == [".ampkit.lock", "step-00000001"]
    finally:
        go.touch()
        out, err = holder.communicate(timeout=120)
    assert holder.returncode == 0, err
    assert out.strip() == "2"  # the holder trained on, undisturbed
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-00000002"]  # its lock released
    again = make(ckpt)
    result = again.fit(batches())  # the folder is free now: this process resumes from it
    assert str(again.resumed_from) == str(ckpt / "step-00000002") and result.steps == 2


def test_save_checkpoint_after_fit_takes_the_lock_only_for_the_write(tmp_path):
    trainer = make(tmp_path / "ckpt", max_steps=1)
    trainer.fit(batches())
    trainer.state.step += 1  # a step without a checkpoint
    assert trainer.save_checkpoint() == tmp_path / "ckpt" / "step-00000002"
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-00000002"]


def test_the_trainer_holds_its_configs_and_no_copy_of_their_fields(tmp_path):
    trainer = make(
        tmp_path / "ckpt",
        eval=EvalConfig(every=1, data=batches()),
        distributed=DistributedConfig(),
        compile=CompileConfig(enabled=False),
    )
    trainer.fit(batches())
    held = set(vars(trainer))
    config_fields = {
        f.name
        for kind in (CheckpointConfig, LoggingConfig, EvalConfig, DistributedConfig, CompileConfig)
        for f in fields(kind)
    }
    assert not held & config_fields, held & config_fields
    assert len(held) < 20, sorted(held)
    assert trainer.checkpointer.config is not None and trainer.checkpointer.config.every == 1


def test_the_trainer_init_is_under_60_lines():
    source = inspect.getsource(trainer_module)
    init = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef)
        and node.name == "__init__"
        and "max_steps" in {a.arg for a in node.args.kwonlyargs}
    )
    assert (init.end_lineno or 0) - init.lineno + 1 < 60


def test_trainer_settings_are_read_from_the_objects_that_hold_them(tmp_path):
    trainer = make(tmp_path / "ckpt", max_steps=3)
    assert trainer.resume == "auto" and trainer.resumed_from is None
    assert trainer.optimizer is None  # built by fit's set-up
    result = trainer.fit(batches())
    assert isinstance(trainer.optimizer, torch.optim.SGD)
    committed = [str(tmp_path / "ckpt" / f"step-{step:08d}") for step in (1, 2, 3)]
    assert result.checkpoints == trainer.checkpointer.saved == committed
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["step-00000003"]  # keep_last=1
    assert ampkit.Trainer is Trainer


def test_a_folder_inside_a_run_folder_this_process_holds_is_not_locked_again(tmp_path):
    from ampkit._lock import LOCK_NAME, FolderLock

    seen: list[bool] = []

    class Look(ampkit.Callback):
        def on_checkpoint(self, trainer, path):
            seen.append((path.parent / LOCK_NAME).exists())

    with FolderLock(tmp_path, flag="--out"):  # as ampkit train holds its --out
        make(tmp_path / "checkpoints", callbacks=[Look()]).fit(batches())
    assert seen == [False, False]
    seen.clear()
    make(tmp_path / "alone", callbacks=[Look()]).fit(batches())  # nobody holds tmp_path now
    assert seen == [True, True]


def test_the_run_config_is_recorded_in_every_manifest(tmp_path):
    import json

    model = nn.Linear(4, 1)
    Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        max_steps=1,
        loss_fn=nn.functional.mse_loss,
        device="cpu",
        checkpoint=CheckpointConfig(tmp_path / "ckpt", run_config={"lr": 0.1}),
    ).fit(batches())
    manifest = json.loads((tmp_path / "ckpt" / "step-00000001" / "manifest.json").read_text())
    assert manifest["config"] == {"lr": 0.1}
