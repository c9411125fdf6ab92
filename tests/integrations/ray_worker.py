"""The training function of the Ray Train tests (test_ray.py): ampkit's Trainer in each Ray
worker, reporting its checkpoints to Ray and resuming from the one Ray restores.

``config``: ``out`` (the run's folder), ``fail`` (rank 1 dies once at step 5 after removing
the run's checkpoint folder, as if its machine were lost, so that only Ray's copy is left).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

import ampkit
from ampkit.integrations.ray import RayReport, resume_from_ray

STEPS, EVERY, BATCH, FAIL_AT = 6, 2, 4, 5


class FailOnce(ampkit.Callback):
    """Rank 1 dies at step ``FAIL_AT`` of the first attempt, the checkpoint folder gone."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_step_end(self, trainer: Any, result: Any) -> None:
        marker = self.out / "failed-once"
        if trainer.step == FAIL_AT and not marker.exists():
            import torch.distributed as dist

            dist.barrier()  # rank 0 is past the same report
            if dist.get_rank() == 1:
                shutil.rmtree(self.out / "ckpt")
                marker.write_text("rank 1 died here\n")
                os._exit(1)


def dataset() -> torch.utils.data.Dataset:
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(
        torch.randn(64, 8, generator=g), torch.randint(0, 4, (64,), generator=g)
    )


def make_trainer(out: Path, resume: str | None, callbacks: list[ampkit.Callback]) -> ampkit.Trainer:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    return ampkit.Trainer(
        model,
        lambda params: torch.optim.AdamW(params, lr=1e-2),
        loss_fn=torch.nn.functional.cross_entropy,
        max_steps=STEPS,
        precision="fp32",
        device="cpu",
        batch_size=BATCH,
        checkpoint=ampkit.CheckpointConfig(out / "ckpt", every=EVERY, resume=resume),
        final_weights=out / "final.safetensors",
        logging=ampkit.LoggingConfig(log_every=1, progress_bar=False),
        callbacks=callbacks,
    )


def train_func(config: dict[str, Any]) -> None:
    """One Ray Train worker."""
    out = Path(config["out"])
    resume = resume_from_ray(out / "ckpt")
    callbacks = [RayReport(), *([FailOnce(out)] if config.get("fail") else [])]
    trainer = make_trainer(out, resume, callbacks)
    result = trainer.fit(dataset())
    if trainer.is_main:
        (out / "resumed_from.txt").write_text(f"{resume}\n{result.resumed_from}\n")


def drive(out: Path, fail: bool) -> None:
    """The Ray driver: a local Ray with 2 CPUs, ``TorchTrainer`` with 2 workers, one failure
    allowed (``FailureConfig(max_failures=1)``), Ray's storage in ``out/ray``."""
    import ray
    import ray.train
    from ray.train.torch import TorchTrainer

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        TorchTrainer(
            train_func,
            train_loop_config={"out": str(out), "fail": fail},
            scaling_config=ray.train.ScalingConfig(
                num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}
            ),
            run_config=ray.train.RunConfig(
                storage_path=str(out / "ray"),
                name="run",
                failure_config=ray.train.FailureConfig(max_failures=1),
            ),
        ).fit()
    finally:
        ray.shutdown()


if __name__ == "__main__":
    import sys

    if sys.argv[1] == "--ray":  # python ray_worker.py --ray OUT [--fail]
        drive(Path(sys.argv[2]), fail="--fail" in sys.argv)
    else:  # the control: torchrun --nproc_per_node=2 ray_worker.py OUT
        make_trainer(Path(sys.argv[1]), None, []).fit(dataset())
