"""Two processes that do not share their checkpoint folder, as on nodes without shared storage.

    torchrun --nproc_per_node=2 unshared_worker.py OUT LAYOUT

Each rank works in its own folder ``OUT/rank<r>`` and is given the same relative checkpoint
folder ``ckpt``, so the one path names a different folder on each rank, as a node-local disk
does. Each rank writes ``OUT/outcome<rank>.json``: what its ``fit`` did (``trained``, its notes
and steps, or the error's type and message) and how long it took.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

import ampkit


def main() -> None:
    out, layout = Path(sys.argv[1]), sys.argv[2]
    rank = int(os.environ["RANK"])
    home = out / f"rank{rank}"
    home.mkdir(parents=True, exist_ok=True)
    os.chdir(home)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    data = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randn(32, 2))
    trainer = ampkit.Trainer(
        model,
        lambda params: torch.optim.SGD(params, lr=0.1),
        loss_fn=torch.nn.functional.mse_loss,
        max_steps=4,
        precision="fp32",
        device="cpu",
        batch_size=4,
        checkpoint=ampkit.CheckpointConfig("ckpt", every=2, layout=layout),
        distributed=ampkit.DistributedConfig(strategy="ddp"),
        logging=ampkit.LoggingConfig(progress_bar=False, log_every=100),
    )
    started = time.monotonic()
    try:
        with trainer:
            result = trainer.fit(data)
        outcome = {"fit": "trained", "notes": result.notes, "steps": result.steps}
    except ampkit.AmpkitError as exc:
        outcome = {"fit": type(exc).__name__, "message": str(exc), "step": trainer.step}
    outcome["seconds"] = time.monotonic() - started
    (out / f"outcome{rank}.json").write_text(json.dumps(outcome, indent=1))


if __name__ == "__main__":
    main()
