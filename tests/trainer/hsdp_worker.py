"""FSDP2 runs over a 1-D and a 2-D mesh, with activation checkpointing and CPU offload, in one
torchrun launch (used by test_hsdp.py).

    torchrun --nproc_per_node=N hsdp_worker.py OUT PLAIN_DCP

Writes into OUT, for each run, ``<run>.safetensors`` (final weights) and ``<run>/ckpt`` (a
sharded checkpoint every 3 of 6 steps): ``fsdp`` (plain FSDP2), ``hsdp`` (``strategy="hsdp"``,
the default mesh: one node, so 1 x N), ``hsdp-2d`` (2 x N/2, with N = 4) or ``hsdp-rep``
(N x 1: replicated, with N = 2), ``hsdp-resumed`` (from hsdp's step 3), ``fsdp-ac``
(activation checkpointing on every block), ``fsdp-offload`` (``cpu_offload=True``), and
``user-mesh`` (a model the caller sharded over a 2-D mesh itself, ``strategy="none"``),
``user-mesh-fsdp`` (the same with ``strategy="fsdp"``: not sharded again),
``fsdp-offload-resumed`` and ``fsdp-ac-resumed`` (from fsdp-offload's and fsdp's step 3),
``hsdp-plain`` (HSDP resumed from PLAIN_DCP, a 1-process ``dcp.save`` that ampkit did not
write); and
``notes.json`` (each run's ``FitResult.notes`` and checkpoint manifest strategy).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import ampkit

STEPS, EVERY, BATCH = 6, 3, 4  # per process; the 1-process runs use WORLD * BATCH


class Net(torch.nn.Module):
    """Blocks in a ModuleList (FSDP2 shards each block, then the root), with dropout, so that
    activation checkpointing must replay the RNG to give the same gradients."""

    def __init__(self, width: int = 16, depth: int = 2, classes: int = 4) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(8, width)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.Linear(width, width), torch.nn.Tanh(), torch.nn.Dropout(0.2)
            )
            for _ in range(depth)
        )
        self.out = torch.nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.inp(x))
        for block in self.blocks:
            h = block(h)
        return self.out(h)


def dataset() -> torch.utils.data.Dataset:
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(
        torch.randn(96, 8, generator=g), torch.randint(0, 4, (96,), generator=g)
    )


def make_trainer(
    out: Path,
    name: str,
    batch_size: int = BATCH,
    *,
    build: Callable[[], torch.nn.Module] | None = None,
    resume: Path | None = None,
    max_steps: int = STEPS,
    **distributed: Any,
) -> ampkit.Trainer:
    torch.manual_seed(0)
    optimizer: Any
    if build is None:  # the Trainer shards it (or not)
        model: torch.nn.Module = Net()
        optimizer = lambda params: torch.optim.AdamW(params, lr=1e-2)  # noqa: E731
    else:  # sharded by the caller: the optimizer over its DTensor parameters
        model = build()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return ampkit.Trainer(
        model,
        optimizer,
        loss_fn=torch.nn.functional.cross_entropy,
        max_steps=max_steps,
        precision="fp32",
        device="cpu",
        batch_size=batch_size,
        checkpoint=ampkit.CheckpointConfig(out / name / "ckpt", every=EVERY, resume=resume),
        distributed=ampkit.DistributedConfig(**distributed),
        final_weights=out / f"{name}.safetensors",
        logging=ampkit.LoggingConfig(log_every=100, progress_bar=False),
    )


def run(out: Path, name: str, batch_size: int = BATCH, **kwargs: Any) -> dict:
    notes = make_trainer(out, name, batch_size, **kwargs).fit(dataset()).notes
    manifest = out / name / "ckpt/step-00000006/manifest.json"
    strategy = json.loads(manifest.read_text())["strategy"] if manifest.exists() else None
    return {"notes": notes, "strategy": strategy}


def user_sharded() -> torch.nn.Module:
    """The Net sharded by the caller over a (2, world/2) or (1, world) mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    world = dist.get_world_size()
    rows = 2 if world % 2 == 0 and world > 2 else 1
    mesh = init_device_mesh("cpu", (rows, world // rows), mesh_dim_names=("replicate", "shard"))
    model = Net()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def main() -> None:
    out, plain = Path(sys.argv[1]), Path(sys.argv[2])
    dist.init_process_group("gloo")  # owned here, so each Trainer leaves it up for the next
    world = dist.get_world_size()
    try:
        notes = {
            "fsdp": run(out, "fsdp", strategy="fsdp"),
            "hsdp": run(out, "hsdp", strategy="hsdp"),
            "hsdp-resumed": run(
                out, "hsdp-resumed", strategy="hsdp", resume=out / "hsdp/ckpt/step-00000003"
            ),
            "fsdp-ac": run(
                out, "fsdp-ac", strategy="fsdp", activation_checkpointing=["blocks.0", "blocks.1"]
            ),
            "fsdp-offload": run(out, "fsdp-offload", strategy="fsdp", cpu_offload=True),
            "fsdp-offload-resumed": run(
                out,
                "fsdp-offload-resumed",
                strategy="fsdp",
                cpu_offload=True,
                resume=out / "fsdp-offload/ckpt/step-00000003",
            ),
            "fsdp-ac-resumed": run(  # a checkpoint without activation checkpointing
                out,
                "fsdp-ac-resumed",
                strategy="fsdp",
                activation_checkpointing=[torch.nn.Sequential],
                resume=out / "fsdp/ckpt/step-00000003",
            ),
            "user-mesh": run(out, "user-mesh", build=user_sharded, strategy="none"),
            "user-mesh-fsdp": run(out, "user-mesh-fsdp", build=user_sharded, strategy="fsdp"),
            "hsdp-plain": run(out, "hsdp-plain", strategy="hsdp", resume=plain),
        }
        if world == 4:
            notes["hsdp-2d"] = run(out, "hsdp-2d", strategy="hsdp", hsdp_shard_size=2)
        else:
            notes["hsdp-rep"] = run(out, "hsdp-rep", strategy="hsdp", hsdp_shard_size=1)
        if dist.get_rank() == 0:
            (out / "notes.json").write_text(json.dumps(notes, indent=1))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
