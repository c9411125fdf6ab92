"""The parameter names a precision mode's metrics are given: those of the model the caller
passed, also after DDP, FSDP2 or ``torch.compile`` wrapped it (DDP and compile keep the
parameters but prefix their names, ``module.`` and ``_orig_mod.``; FSDP2 replaces them with
sharded ones under the same names), built once per ``fit``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
import torch.multiprocessing as mp
from gloo_group import gloo_group
from torch import nn

import ampkit
from ampkit.precision.modes import ModeField, PrecisionMode, register_mode, unregister_mode
from ampkit.trainer.metrics import StepMetrics

NAMES = "toy-param-names"
#: The names of :func:`make_model`'s parameters, in the optimizer's order.
EXPECTED = "0.weight,0.bias,2.weight,2.bias"


class ParamNames(PrecisionMode):
    """fp32 training whose metrics row names every parameter the optimizer steps, as the
    Trainer's name map calls them (``?`` for one it does not name)."""

    precisions: ClassVar[tuple[str, ...]] = (NAMES,)
    metric_fields: ClassVar[tuple[ModeField, ...]] = (
        ModeField("toy_param_names", str, "the optimizer's parameters, by name"),
    )

    def __init__(self) -> None:
        super().__init__(NAMES)
        self.maps: list[Mapping[int, str]] = []  # every name map handed in (kept alive)

    @classmethod
    def from_parsed(cls, parsed: Any, options: Mapping[str, Any]) -> PrecisionMode:
        return cls()

    def step_metrics(
        self, optimizer: torch.optim.Optimizer, *, step: int, names: Mapping[int, str]
    ) -> dict[str, Any]:
        self.maps.append(names)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        return {"toy_param_names": ",".join(names.get(id(p), "?") for p in params)}


@contextmanager
def registered() -> Iterator[None]:
    register_mode(ParamNames, compute_dtype=torch.float32)
    try:
        yield
    finally:
        unregister_mode(NAMES)


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def run(**kwargs: Any) -> tuple[list[StepMetrics], ampkit.Trainer]:
    """Three logged steps of :func:`make_model` under :data:`NAMES`; the rows and the Trainer."""
    rows: list[StepMetrics] = []

    class Keep(ampkit.Callback):
        def on_log(self, trainer: Any, metrics: StepMetrics) -> None:
            rows.append(metrics)

    torch.manual_seed(1)
    x = torch.randn(24, 4)
    trainer = ampkit.Trainer(
        make_model(),
        lambda params: torch.optim.SGD(params, lr=0.1),
        loss_fn=nn.functional.mse_loss,
        max_steps=3,
        precision=NAMES,
        device="cpu",
        batch_size=4,
        logging=ampkit.LoggingConfig(log_every=1, progress_bar=False),
        callbacks=[Keep()],
        **kwargs,
    )
    trainer.fit(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)))
    return rows, trainer


def test_the_metrics_row_names_the_parameters_as_the_model_does():
    with registered():
        rows, trainer = run()
    assert [row.mode_metrics["toy_param_names"] for row in rows] == [EXPECTED] * 3
    maps = trainer.mp.mode.maps
    assert len(maps) == 3 and all(m is maps[0] for m in maps)  # one map for the fit, not per row


@pytest.mark.slow  # torch.compile on the CPU: ~30 s on a busy 2-core machine
def test_compile_leaves_the_names_the_models_own():
    with registered():
        rows, trainer = run(compile=ampkit.CompileConfig(enabled=True))
    assert type(trainer.model).__name__ == "OptimizedModule"  # wrapped: "_orig_mod.0.weight"
    assert [row.mode_metrics["toy_param_names"] for row in rows] == [EXPECTED] * 3


WORLD = 2


def _worker(rank: int, store: str, out: str, strategy: str) -> None:
    with gloo_group(rank, WORLD, store), registered():
        rows, trainer = run(distributed=ampkit.DistributedConfig(strategy=strategy))
        wrapped = type(trainer.model).__name__
        torch.save(
            ([row.mode_metrics["toy_param_names"] for row in rows], wrapped),
            Path(out) / f"r{rank}.pt",
        )
        trainer.close()


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("strategy", "wrapper"), [("ddp", "DistributedDataParallel"), ("fsdp", "FSDPSequential")]
)
def test_ddp_and_fsdp_leave_the_names_the_models_own(tmp_path, strategy, wrapper):
    mp.spawn(
        _worker, args=(str(tmp_path / "store"), str(tmp_path), strategy), nprocs=WORLD, join=True
    )
    for rank in range(WORLD):
        names, wrapped = torch.load(tmp_path / f"r{rank}.pt", weights_only=False)
        assert names == [EXPECTED] * 3, rank
        # DDP wraps the module ("module.0.weight"); FSDP2 shards it in place, as new
        # (DTensor) parameters: a map built before the wrapping would name none of them
        assert wrapped == wrapper, rank
