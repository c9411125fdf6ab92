"""Two-process FSDP2 runs with sharded checkpoints, in one torchrun launch (used by the tests).

    torchrun --nproc_per_node=2 sharded_worker.py OUT ONE_PROCESS_CHECKPOINT

Writes into OUT: ``<run>.safetensors`` (final weights) and ``<run>/ckpt`` for the runs
``straight`` (6 steps, a checkpoint every 3), ``resumed`` (from straight's step 3),
``async`` (as straight, with ``CheckpointConfig(async_save=True)``), ``from-one`` (from a 1-process
checkpoint); ``notes.json`` (each run's ``FitResult.notes``), ``memory.json``
(rank 0's resident memory while it saves a larger model, sharded and full) and
``hashed_at_commit.json`` (the files rank 0 read back to hash while committing straight's
checkpoints).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

import ampkit
from ampkit.checkpoint import folder as checkpoint_folder

STEPS, EVERY, BATCH = 6, 3, 4  # per process; the 1-process runs use 2 * BATCH


class Net(torch.nn.Module):
    """Blocks in a ModuleList, so FSDP2 shards each block and then the root."""

    def __init__(self, width: int = 16, depth: int = 2, classes: int = 4) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(8, width)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.out = torch.nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.inp(x))
        for block in self.blocks:
            h = torch.tanh(block(h))
        return self.out(h)


def dataset() -> torch.utils.data.Dataset:
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(
        torch.randn(64, 8, generator=g), torch.randint(0, 4, (64,), generator=g)
    )


def make_trainer(
    out: Path,
    name: str,
    batch_size: int,
    *,
    net: dict | None = None,
    max_steps: int = STEPS,
    strategy: str = "auto",
    resume: Path | None = None,
    async_save: bool = False,
    layout: str = "auto",
    callbacks: list | tuple = (),
    final_weights: bool = True,
) -> ampkit.Trainer:
    torch.manual_seed(0)
    model = Net(**(net or {}))
    return ampkit.Trainer(
        model,
        lambda params: torch.optim.AdamW(params, lr=1e-2),
        loss_fn=torch.nn.functional.cross_entropy,
        max_steps=max_steps,
        precision="fp32",
        device="cpu",
        batch_size=batch_size,
        scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
        checkpoint=ampkit.CheckpointConfig(
            out / name / "ckpt", every=EVERY, resume=resume, layout=layout, async_save=async_save
        ),
        distributed=ampkit.DistributedConfig(strategy=strategy),
        final_weights=out / f"{name}.safetensors" if final_weights else None,
        logging=ampkit.LoggingConfig(log_every=100),
        callbacks=callbacks,
    )


def run(out: Path, name: str, batch_size: int = BATCH, **kwargs) -> list[str]:
    return make_trainer(out, name, batch_size, **kwargs).fit(dataset()).notes


class PeakRss:
    """Samples this process's resident memory every millisecond while active."""

    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.peak = self.start = 0
        self._stop = threading.Event()

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def __enter__(self) -> PeakRss:
        self.start = self.peak = self.rss()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.001)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())


class RecordedCommitHashes:
    """Records the files this process reads back to hash while committing checkpoints."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __enter__(self) -> RecordedCommitHashes:
        self._real = checkpoint_folder.file_digest

        def recording(path, *args, **kwargs):
            self.names.append(Path(path).name)
            return self._real(path, *args, **kwargs)

        checkpoint_folder.file_digest = recording
        return self

    def __exit__(self, *exc: object) -> None:
        checkpoint_folder.file_digest = self._real


def measure_save(out: Path, name: str, depth: int, layout: str) -> dict[str, float]:
    """Rank 0's extra resident memory while the checkpoint of a width-1024 model is saved."""
    trainer = make_trainer(
        out,
        name,
        BATCH,
        net={"width": 1024, "depth": depth},
        max_steps=1,
        layout=layout,
        strategy="fsdp",
        final_weights=False,
    )
    rss, save = PeakRss(), trainer.checkpointer.save

    def measured_save(*args, **kwargs) -> list[Path]:  # rank 0's memory while the save runs
        dist.barrier()
        with rss:
            return save(*args, **kwargs)

    trainer.checkpointer.save = measured_save  # type: ignore[method-assign]
    trainer.fit(dataset())  # one step, then its checkpoint
    params = sum(p.numel() for p in trainer.raw_model.parameters())  # global sizes (DTensor)
    return {
        "layout": layout,
        "depth": depth,
        "model_mib": params * 4 / 2**20,
        "extra_rss_mib": (rss.peak - rss.start) / 2**20,
    }


def main() -> None:
    out, one = Path(sys.argv[1]), Path(sys.argv[2])
    dist.init_process_group("gloo")  # owned here, so each Trainer leaves it up for the next
    try:
        with RecordedCommitHashes() as hashed:
            straight = run(out, "straight", strategy="fsdp")
        notes = {
            "straight": straight,
            "resumed": run(
                out, "resumed", strategy="fsdp", resume=out / "straight/ckpt/step-00000003"
            ),
            "async": run(out, "async", strategy="fsdp", async_save=True),
            "from-one": run(out, "from-one", strategy="fsdp", resume=one),
        }
        memory = [
            measure_save(out, "mem-small", 4, "sharded"),
            measure_save(out, "mem-large", 8, "sharded"),
            measure_save(out, "mem-full", 8, "full"),
        ]
        if dist.get_rank() == 0:
            (out / "notes.json").write_text(json.dumps(notes, indent=1))
            (out / "memory.json").write_text(json.dumps(memory, indent=1))
            (out / "hashed_at_commit.json").write_text(json.dumps(hashed.names))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
