"""Trainer runs whose optimizer state mixes dtypes, for the exact-resume tests.

    torchrun --nproc_per_node=2 exact_state_worker.py OUT ONE_PROCESS_CHECKPOINT

Under FSDP2 with sharded checkpoints, for each case of :data:`CASES`: ``<case>-straight`` (4
steps, a checkpoint every 2), ``<case>-resumed`` (from straight's step 2) and
``<case>-from-one`` (from a 1-process checkpoint of step 2: resharded 1 -> 2). Writes
``<run>.safetensors`` (final weights) and the optimizer state of each process when fit starts,
at each checkpoint and at the end (:class:`Record`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

import ampkit
from ampkit.callbacks import Callback

STEPS, EVERY, BATCH = 4, 2, 4  # per process; the 1-process runs use 2 * BATCH


class Bf16MomentumSGD(torch.optim.Optimizer):
    """SGD with momentum whose buffer is stored in bf16: fp32 parameters, bf16 state."""

    def __init__(self, params, lr: float = 0.05, momentum: float = 0.9) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].get("momentum_buffer")
                if buf is None:
                    buf = self.state[p]["momentum_buffer"] = torch.zeros_like(
                        p, dtype=torch.bfloat16
                    )
                new = buf.float().mul_(group["momentum"]).add_(p.grad)
                buf.copy_(new)
                p.add_(new, alpha=-group["lr"])


#: case -> (precision, optimizer factory)
CASES = {
    "bf16-moments": ("bf16", lambda params: Bf16MomentumSGD(params)),
    "bf16-true": ("bf16-true", lambda params: torch.optim.AdamW(params, lr=1e-2)),
    "bf16-true-kahan-state": (
        ampkit.Bf16True(state_precision="bf16-kahan"),
        lambda params: torch.optim.AdamW(params, lr=1e-2),
    ),
}


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)
    )


def dataset() -> torch.utils.data.Dataset:
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(
        torch.randn(64, 8, generator=g), torch.randint(0, 4, (64,), generator=g)
    )


def trainer(
    out: Path, case: str, name: str, batch_size: int, *, layout: str, resume=None, strategy="auto"
) -> ampkit.Trainer:
    precision, optimizer = CASES[case]
    if isinstance(precision, ampkit.Bf16True):  # one mode object per run
        precision = ampkit.Bf16True(state_precision=precision.state_precision)
    return ampkit.Trainer(
        net(),
        optimizer,
        loss_fn=lambda out, y: torch.nn.functional.cross_entropy(out.float(), y),
        max_steps=STEPS,
        precision=precision,
        device="cpu",
        batch_size=batch_size,
        checkpoint=ampkit.CheckpointConfig(
            out / f"{case}-{name}" / "ckpt", every=EVERY, resume=resume, layout=layout
        ),
        distributed=ampkit.DistributedConfig(strategy=strategy),
        final_weights=out / f"{case}-{name}.safetensors",
        logging=ampkit.LoggingConfig(log_every=100),
    )


def local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def state_of(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Each state tensor of this process (its local shard under FSDP2), by parameter index."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return {
        f"{i}.{key}": local(value).detach().clone()
        for i, p in enumerate(params)
        for key, value in sorted(optimizer.state.get(p, {}).items())
        if torch.is_tensor(value)
    }


class Record(Callback):
    """Saves the optimizer state when fit starts (after a resume), at each checkpoint step and
    at the end: ``<run>-<when>-rank<r>.pt``."""

    def __init__(self, out: Path, run: str, rank: int) -> None:
        self.out, self.run, self.rank = out, run, rank

    def save(self, trainer, when: str) -> None:
        path = self.out / f"{self.run}-{when}-rank{self.rank}.pt"
        torch.save(state_of(trainer.optimizer), path)

    def on_fit_start(self, trainer) -> None:
        self.save(trainer, "start")

    def on_step_end(self, trainer, result) -> None:  # every rank (on_checkpoint: rank 0)
        if trainer.state.step % EVERY == 0:
            self.save(trainer, f"step{trainer.state.step}")

    def on_fit_end(self, trainer, result) -> None:
        self.save(trainer, "end")


def fit(out: Path, case: str, name: str, batch_size: int, rank: int = 0, **kwargs) -> None:
    t = trainer(out, case, name, batch_size, **kwargs)
    t.callbacks.append(Record(out, f"{case}-{name}", rank))
    with t:
        t.fit(dataset())


def main(out: Path, one: Path) -> None:
    rank = int(os.environ.get("RANK", "0"))
    for case in CASES:
        fit(out, case, "straight", BATCH, rank, strategy="fsdp", layout="sharded")
        step2 = out / f"{case}-straight" / "ckpt" / "step-00000002"
        fit(out, case, "resumed", BATCH, rank, strategy="fsdp", layout="sharded", resume=step2)
        from_one = one / f"{case}-one" / "ckpt" / "step-00000002"
        fit(out, case, "from-one", BATCH, rank, strategy="fsdp", layout="sharded", resume=from_one)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
