"""Worker for test_lifecycle.py, run by ``torchrun --nproc-per-node 2``: the process group
outlives ``fit()`` so collectives after it work, and ``close()`` releases it.

Phase 1: a Trainer joins the group, fits (checkpoints at steps 2 and 4), evaluates after
``fit`` (an all-reduce) and is closed. Phase 2: a Trainer resumes step 4 into another folder
(``fit`` runs no step and writes nothing), then ``save_checkpoint()`` writes it there (a
collective gather, agreement and barrier). Rank 0 records what it saw in ``report.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import ampkit


def make(folder: Path, resume: Path | None = None) -> ampkit.Trainer:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    return ampkit.Trainer(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-2),
        loss_fn=torch.nn.functional.cross_entropy,
        max_steps=4,
        precision="fp32",
        device="cpu",
        batch_size=4,
        checkpoint=ampkit.CheckpointConfig(folder, every=2, resume=resume),
        logging=ampkit.LoggingConfig(log_every=100),
    )


def main() -> None:
    out = Path(sys.argv[1])
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(
        torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g)
    )
    report: dict = {}
    first = make(out / "a")
    report["joined_at_construction"] = dist.is_initialized()
    first.fit(data)
    report["initialized_after_fit"] = dist.is_initialized()
    report["eval_loss"] = first.evaluate([data[i * 4 : (i + 1) * 4] for i in range(4)])
    report["repeat_save"] = first.save_checkpoint()  # step 4 has its checkpoint: skipped
    report["owned"] = first.dist.owns_group
    first.close()
    first.close()
    report["initialized_after_close"] = dist.is_initialized()

    with make(out / "b", resume=out / "a" / "step-00000004") as second:
        second.fit(data)
        saved = second.save_checkpoint()
        report["saved"] = str(saved) if saved else None
        report["rank"] = second.dist.rank
        report["world_size"] = second.dist.world_size
    report["initialized_after_with"] = dist.is_initialized()
    if report["rank"] == 0:
        (out / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
