"""Two-process bf16-true runs (DDP and FSDP2), in one torchrun launch (used by
test_bf16_true_distributed.py).

    torchrun --nproc_per_node=2 bf16_true_worker.py OUT [--fp8]

Writes into OUT, for each run: ``<run>.safetensors`` (final weights, rank 0),
``<run>.rank<r>.pt`` (this rank's full parameters and the optimizer state's dtypes, after the
run) and ``<run>/ckpt`` for the checkpointed runs. Runs: ``ddp`` (default state),
``ddp-stochastic`` (stochastic rounding of weights and state), ``fsdp`` and ``fsdp-kahan``
(state in bf16 with Kahan residuals), 6 steps with a sharded checkpoint every 3, and
``fsdp-resumed`` / ``fsdp-kahan-resumed`` from their step 3; with ``--fp8`` (torchao
installed), ``fp8-fsdp``: emulated fp8 under FSDP2.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

import ampkit

STEPS, EVERY, BATCH = 6, 3, 4  # per process; the 1-process runs use 2 * BATCH


class Block(torch.nn.Module):
    """A norm (kept fp32 under bf16-true) and a Linear (bf16): one FSDP2 block, two dtypes."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(self.norm(x)))


class Net(torch.nn.Module):
    def __init__(self, width: int = 16, depth: int = 2, classes: int = 4) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(8, width)
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.norm = torch.nn.LayerNorm(width)
        self.out = torch.nn.Linear(width, classes)  # the final projection: fp32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.out(self.norm(h))


def dataset() -> torch.utils.data.Dataset:
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(
        torch.randn(64, 8, generator=g), torch.randint(0, 4, (64,), generator=g)
    )


MODES = {
    "default": {},
    "stochastic": {"update_compensation": "stochastic", "state_precision": "bf16-stochastic"},
    "kahan": {"state_precision": "bf16-kahan"},
}


def make_trainer(
    out: Path,
    name: str,
    batch_size: int,
    *,
    mode: str = "default",
    strategy: str = "auto",
    checkpoint: bool = False,
    resume: Path | None = None,
    rows: list[dict] | None = None,
) -> ampkit.Trainer:
    torch.manual_seed(0)
    return ampkit.Trainer(
        Net(),
        lambda params: torch.optim.AdamW(params, lr=1e-2),
        loss_fn=torch.nn.functional.cross_entropy,
        max_steps=STEPS,
        precision=ampkit.Bf16True(**MODES[mode]),
        device="cpu",
        batch_size=batch_size,
        checkpoint=ampkit.CheckpointConfig(out / name / "ckpt", every=EVERY, resume=resume)
        if checkpoint or resume
        else None,
        distributed=ampkit.DistributedConfig(strategy=strategy),
        final_weights=out / f"{name}.safetensors",
        logging=ampkit.LoggingConfig(log_every=1),
        callbacks=[_Rows(rows if rows is not None else [])],
    )


def full_parameters(trainer: ampkit.Trainer) -> dict[str, torch.Tensor]:
    """Every parameter in full (gathered from the shards under FSDP2), as stored."""
    out = {}
    for name, p in trainer.raw_model.named_parameters():
        value = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[name] = value.detach().clone()
    return out


def run(out: Path, name: str, batch_size: int = BATCH, **kwargs) -> None:
    rows: list[dict] = []
    trainer = make_trainer(out, name, batch_size, rows=rows, **kwargs)
    trainer.fit(dataset())
    state_dtypes = sorted(
        {f"{k}:{v.dtype}" for s in trainer.optimizer.state.values() for k, v in s.items()}
    )
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.save(
        {"params": full_parameters(trainer), "state_dtypes": state_dtypes, "rows": rows},
        out / f"{name}.rank{rank}.pt",
    )


class _Rows(ampkit.Callback):
    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows

    def on_log(self, trainer, metrics) -> None:
        self.rows.append(
            {"lost_updates": metrics.lost_updates, "lost_state_updates": metrics.lost_state_updates}
        )


class Fp8Net(torch.nn.Module):
    """Linears whose sizes are multiples of 16, as fp8 needs."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(16, width)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(2))
        self.out = torch.nn.Linear(width, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.inp(x))
        for block in self.blocks:
            h = torch.tanh(block(h))
        return self.out(h)


def run_fp8(out: Path, name: str, batch_size: int = BATCH, strategy: str = "fsdp") -> None:
    """fp8 (tensorwise, torchao's emulation on the CPU) with every Linear converted; SGD, whose
    update is linear in the gradient (AdamW's normalisation would blow each rank's own fp8
    rounding of small gradients up to whole steps of lr)."""
    from ampkit.precision.modes.fp8 import Fp8

    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(
        torch.randn(64, 16, generator=g), torch.randint(0, 16, (64,), generator=g)
    )
    torch.manual_seed(0)
    model = Fp8Net()
    plan = ampkit.fp8_plan(
        model, data[:16], loss_fn=torch.nn.functional.cross_entropy, use_size_prior=False
    )
    trainer = ampkit.Trainer(
        model,
        lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
        loss_fn=torch.nn.functional.cross_entropy,
        max_steps=STEPS,
        precision=Fp8(plan=plan, emulate=True),
        device="cpu",
        batch_size=batch_size,
        distributed=ampkit.DistributedConfig(strategy=strategy),
        logging=ampkit.LoggingConfig(log_every=100),
    )
    result = trainer.fit(data)
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.save(
        {
            "params": full_parameters(trainer),
            "converted": list(plan.selected),
            "loss": result.final_loss,
        },
        out / f"{name}.rank{rank}.pt",
    )


def main() -> None:
    out = Path(sys.argv[1])
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo")  # owned here, so each Trainer leaves it up for the next
    try:
        run(out, "ddp", strategy="ddp")
        run(out, "ddp-stochastic", strategy="ddp", mode="stochastic")
        for mode, name in (("default", "fsdp"), ("kahan", "fsdp-kahan")):
            run(out, name, strategy="fsdp", mode=mode, checkpoint=True)
            ckpt = out / name / "ckpt" / "step-00000003"
            run(out, f"{name}-resumed", strategy="fsdp", mode=mode, resume=ckpt)
        if "--fp8" in sys.argv:
            run_fp8(out, "fp8-fsdp")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
