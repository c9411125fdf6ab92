"""A training run that can kill itself with SIGKILL at a chosen moment (used by the tests).

    python resume_worker.py CKPT_DIR OUT_FILE [--kill between|during-write|before-rename]
        [--layout full|sharded]

Trains a small MLP for 12 steps with a checkpoint every 3 and ``resume="auto"``, then writes
the final weights to OUT_FILE. The kill modes patch nothing in ampkit's logic: they wrap the
file-system calls ampkit.checkpoint.folder makes, the way a crash at that moment would interrupt them.
"""

from __future__ import annotations

import os
import signal
import sys

import torch
from safetensors.torch import save_file

import ampkit
from ampkit.checkpoint import folder as ckpt

KILL_STEP = 9


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def install_kill(mode: str) -> list[ampkit.Callback]:
    if mode == "between":

        class KillAt(ampkit.Callback):
            def on_step_end(self, trainer, result):
                if trainer.step == KILL_STEP - 2:  # after checkpoint 6, before checkpoint 9
                    die()

        return [KillAt()]
    if mode == "during-write":
        real_write = ckpt._write_state  # how ampkit.checkpoint.folder writes state.pt

        def half_write(path, state):
            if f"step-{KILL_STEP:08d}" in str(path) and path.name == "state.pt":
                data = state if isinstance(state, bytes) else ckpt.serialise_state(state)
                with open(path, "wb") as f:
                    f.write(data[: len(data) // 2])
                die()
            return real_write(path, state)

        ckpt._write_state = half_write
        return []
    if mode == "before-rename":
        real_replace = os.replace

        def crash_replace(src, dst):
            if str(dst).endswith(f"step-{KILL_STEP:08d}"):
                die()
            real_replace(src, dst)

        ckpt.os.replace = crash_replace  # the os module as ampkit.checkpoint.folder sees it
        return []
    return []


def main() -> None:
    ckpt_dir, out_file, options = sys.argv[1], sys.argv[2], sys.argv[3:]
    mode = options[options.index("--kill") + 1] if "--kill" in options else ""
    layout = options[options.index("--layout") + 1] if "--layout" in options else "auto"
    callbacks = install_kill(mode)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(12, 32), torch.nn.Dropout(0.1), torch.nn.GELU(), torch.nn.Linear(32, 3)
    )
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(
        torch.randn(96, 12, generator=g), torch.randint(0, 3, (96,), generator=g)
    )
    trainer = ampkit.Trainer(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-2),
        loss_fn=torch.nn.functional.cross_entropy,
        max_steps=12,
        precision="fp32",
        device="cpu",
        batch_size=8,
        grad_accum_steps=2,
        max_grad_norm=1.0,
        scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5),
        checkpoint=ampkit.CheckpointConfig(ckpt_dir, every=3, resume="auto", layout=layout),
        callbacks=callbacks,
        logging=ampkit.LoggingConfig(log_every=1),
    )
    trainer.fit(data)  # 96 samples / (8 * 2) = 6 steps per epoch: crosses an epoch boundary
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, out_file)


if __name__ == "__main__":
    main()
