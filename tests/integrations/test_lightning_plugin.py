"""ampkit.integrations.lightning: AmpkitPrecision and AmpkitCallback in a real Lightning Trainer,
on the CPU: fp16 (honoured, with ampkit's LossScaler) and bf16, automatic and manual
optimization, gradient accumulation; the logged keys are read back from Lightning's CSV logger."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from torch import nn

pl = pytest.importorskip(
    "lightning.pytorch",
    reason="the Lightning tests need lightning: pip install 'ampkit[lightning]'",
)

import ampkit  # noqa: E402
from ampkit.errors import ConfigurationError, NonFiniteTrainingError  # noqa: E402
from ampkit.integrations import LOSS_SCALE, LOST_UPDATES, NONFINITE_STEP, SKIPPED_STEPS  # noqa: E402
from ampkit.integrations.lightning import AmpkitCallback, AmpkitPrecision  # noqa: E402

fp16_on_cpu = pytest.mark.filterwarnings("ignore:.*fp16.*:ampkit.errors.PrecisionWarning")
pytestmark = [fp16_on_cpu, pytest.mark.filterwarnings("ignore::UserWarning:lightning")]

BATCH, STEPS = 4, 6
INIT = 2.0**8  # no overflow of its own in this model: only the injected ones skip


def scaler() -> ampkit.LossScaler:
    return ampkit.LossScaler(init_scale=INIT)


def data(n: int = BATCH * STEPS) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g)
    dataset = torch.utils.data.TensorDataset(x, y)
    return torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=False)


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


class Module(pl.LightningModule):
    """A regression; ``overflow`` holds the batch indices whose loss is multiplied by 1e30
    (finite in fp32, but its fp16 gradients overflow)."""

    def __init__(
        self, overflow: set[int] = frozenset(), manual: bool = False, lr=0.1, rank=None
    ) -> None:
        super().__init__()
        self.net = net()
        self.overflow, self.lr, self.rank = set(overflow), lr, rank
        self.schedule = False
        self.grad_inf: tuple[int | None, set[int]] = (None, set())
        self.automatic_optimization = not manual

    def loss(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x).float(), y)
        here = self.rank is None or self.rank == self.global_rank
        return loss * 1e30 if here and batch_idx in self.overflow else loss

    def training_step(self, batch, batch_idx):
        self.batch_idx = batch_idx
        loss = self.loss(batch, batch_idx)
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return None

    def on_after_backward(self):
        """``grad_inf``: (rank, batch indices) whose gradient turns inf after DDP's all-reduce,
        on that rank only."""
        rank, steps = self.grad_inf
        if rank == self.global_rank and self.batch_idx in steps:
            self.net[0].weight.grad[0, 0] = math.inf

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        if not self.schedule:
            return optimizer
        halve = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": halve, "interval": "step"}}

    def train_dataloader(self):
        return data()


def fit(tmp_path, module, precision, *, callback=True, cb=None, **kwargs):
    """Train on the CPU; returns (CSV rows of the logged steps, the callback)."""
    cb = cb or AmpkitCallback()
    logger = pl.loggers.CSVLogger(str(tmp_path), name="run", version=0)
    settings = dict(
        accelerator="cpu",
        max_steps=STEPS,
        log_every_n_steps=1,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    settings.update(kwargs)
    extra = settings.pop("callbacks", [])
    trainer = pl.Trainer(
        plugins=[precision], callbacks=([cb] if callback else []) + extra, **settings
    )
    trainer.fit(module)  # the logger writes metrics.csv when training ends
    path = tmp_path / "run" / "version_0" / "metrics.csv"
    rows = []
    if path.exists():  # nothing logged, no file
        with open(path) as f:
            rows = [r for r in csv.DictReader(f) if r.get(SKIPPED_STEPS)]
    return trainer, rows, cb


def column(rows, key):
    return [float(r[key]) for r in rows]


def test_fp16_on_cpu_skips_exactly_the_injected_overflows(tmp_path):
    injected = {1, 2, 4}  # batch indices = steps 2, 3, 5
    precision = AmpkitPrecision("fp16", scaler=scaler())
    trainer, rows, cb = fit(tmp_path, Module(injected), precision)
    assert precision.policy.precision == "fp16" and precision.policy.device.type == "cpu"
    assert trainer.precision == "16-mixed"
    assert precision.stats.steps == STEPS and precision.stats.skipped_steps == len(injected)
    assert column(rows, SKIPPED_STEPS) == [0, 1, 2, 2, 3, 3]
    assert column(rows, LOSS_SCALE) == [INIT, INIT / 2, INIT / 4, INIT / 4, INIT / 8, INIT / 8]
    assert cb.skipped_steps == 3 and cb.nonfinite_step is None  # the losses stayed finite


def test_fp16_matches_ampkit_mixed_precision_bitwise(tmp_path):
    """The plugin's updates are those of the hand-written MixedPrecision loop."""
    module = Module({2})
    fit(tmp_path, module, AmpkitPrecision("fp16", scaler=scaler()), callback=False)
    model = Module({2})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with ampkit.MixedPrecision("fp16", "cpu", scaler=scaler()) as mp:
        for index, batch in enumerate(data()):
            with mp.autocast():
                loss = model.loss(batch, index)
            mp.backward(loss)
            mp.step(optimizer)
    assert mp.stats.skipped_steps == 1
    for a, b in zip(module.parameters(), model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_bf16_runs_without_a_scaler(tmp_path):
    precision = AmpkitPrecision("bf16")
    trainer, rows, cb = fit(tmp_path, Module(), precision)
    assert trainer.precision == "bf16-mixed" and not precision.scaler.is_enabled()
    assert column(rows, SKIPPED_STEPS) == [0] * STEPS
    assert all(not r.get(LOSS_SCALE) for r in rows)
    assert precision.stats.steps == STEPS


def test_manual_optimization(tmp_path):
    precision = AmpkitPrecision("fp16", scaler=scaler())
    _, rows, _ = fit(tmp_path, Module({0, 3}, manual=True), precision)
    assert column(rows, SKIPPED_STEPS) == [1, 1, 1, 2, 2, 2]
    assert precision.stats.steps == STEPS


def test_gradient_accumulation_counts_optimizer_steps(tmp_path):
    """Two micro-batches per step; an overflow in either skips that step once."""
    precision = AmpkitPrecision("fp16", scaler=scaler())
    module = Module({1, 2, 3})  # micro-batches of steps 1, 2, 2 -> steps 1 and 2 skip
    _, rows, _ = fit(tmp_path, module, precision, max_steps=3, accumulate_grad_batches=2)
    assert precision.stats.steps == 3 and precision.stats.skipped_steps == 2
    assert column(rows, SKIPPED_STEPS) == [1, 2, 2]
    assert column(rows, LOSS_SCALE) == [INIT / 2, INIT / 4, INIT / 4]


def test_collapsed_scale_is_a_typed_error(tmp_path):
    scaler = ampkit.LossScaler(init_scale=4.0, min_scale=1.0, max_skips_at_min_scale=2)
    with pytest.raises(NonFiniteTrainingError):
        fit(tmp_path, Module(set(range(STEPS))), AmpkitPrecision("fp16", scaler=scaler))


def test_nonfinite_loss_names_the_module(tmp_path):
    module = Module()
    with torch.no_grad():
        module.net[2].weight[0, 3] = math.nan
    cb = AmpkitCallback(trace_nonfinite=True)
    _, rows, _ = fit(tmp_path, module, AmpkitPrecision("bf16"), cb=cb, max_steps=3)
    assert cb.nonfinite_step == 1
    assert cb.first.module == "net.2" and cb.first.phase == "forward"
    assert column(rows, NONFINITE_STEP) == [1, 1, 1]


@pytest.mark.filterwarnings("ignore:update_compensation='none':ampkit.errors.PrecisionWarning")
def test_bf16_true_logs_lost_updates(tmp_path):
    """bf16 weights: with lr 1e-7 plain rounding loses (nearly) every update; Kahan keeps them."""
    lost = {}
    for compensation in ("none", "kahan"):
        precision = AmpkitPrecision(ampkit.Bf16True(update_compensation=compensation))
        module = Module(lr=1e-7)
        _, rows, _ = fit(tmp_path / compensation, module, precision, max_steps=2)
        assert module.net[0].weight.dtype == torch.bfloat16
        assert precision.precision == "bf16-true"
        lost[compensation] = column(rows, LOST_UPDATES)
    assert all(v > 0.9 for v in lost["none"]), lost
    assert all(v < 0.05 for v in lost["kahan"]), lost


def test_bf16_true_state_precision_goes_into_the_mode_and_the_optimizer():
    precision = AmpkitPrecision(ampkit.Bf16True(state_precision="bf16-stochastic"), "cpu")
    assert precision.mp.mode.state_precision == "bf16-stochastic"
    opt = precision.mp.prepare_optimizer(torch.optim.AdamW(nn.Linear(2, 2).bfloat16().parameters()))
    assert isinstance(opt, ampkit.CompensatedOptimizer) and opt.state_precision == "bf16-stochastic"


def test_the_old_bf16_true_keyword_of_the_plugin_warns_with_the_mode_object():
    with pytest.warns(
        DeprecationWarning,
        match=r"AmpkitPrecision\(bf16_true_state_precision=\.\.\.\) is deprecated.*"
        r"AmpkitPrecision\(precision=ampkit\.Bf16True\(state_precision=\.\.\.\)\)",
    ):
        precision = AmpkitPrecision("bf16-true", "cpu", bf16_true_state_precision="bf16-kahan")
    assert precision.mp.mode.state_precision == "bf16-kahan"
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ConfigurationError, match="state_precision: given, but"),
    ):
        AmpkitPrecision("bf16", "cpu", bf16_true_state_precision="bf16-kahan")


def test_keep_fp32_runs_the_island_in_fp32(tmp_path):
    for keep, expected in ((["net.2"], torch.float32), (None, torch.bfloat16)):
        seen: dict[str, torch.dtype] = {}
        module = Module()
        module.net[2].register_forward_hook(
            lambda m, a, out, seen=seen: seen.update(dtype=out.dtype)
        )
        precision = AmpkitPrecision("bf16", keep_fp32=keep)
        fit(tmp_path / str(keep), module, precision, max_steps=1, callback=False)
        assert seen["dtype"] == expected


def test_unsupported_precision_and_options_are_refused():
    with pytest.raises(ConfigurationError, match="precision"):
        AmpkitPrecision("fp17")
    with pytest.raises(ConfigurationError, match="scaler"):
        AmpkitPrecision("bf16", scaler=ampkit.LossScaler())


def test_callback_counts_skips_of_lightnings_own_gradscaler(tmp_path):
    """Lightning's own fp16 plugin (forced onto the CPU with a CPU GradScaler): the callback
    counts its skipped steps from the scale, on the device."""
    from lightning.pytorch.plugins.precision import MixedPrecision

    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=INIT))
    _, rows, cb = fit(tmp_path, Module({1, 2, 4}), plugin)
    assert column(rows, SKIPPED_STEPS) == [0, 1, 2, 2, 3, 3]
    assert column(rows, LOSS_SCALE) == [INIT, INIT / 2, INIT / 4, INIT / 4, INIT / 8, INIT / 8]
    assert cb.skipped_steps == 3


def test_scaler_state_is_in_lightning_checkpoints(tmp_path):
    precision = AmpkitPrecision("fp16", scaler=scaler())
    trainer, _, _ = fit(tmp_path, Module({0}), precision, max_steps=2)
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    state = torch.load(path, weights_only=False)["AmpkitPrecision"]
    assert state["scale"] == INIT / 2
    restored = AmpkitPrecision("fp16", scaler=scaler())
    restored.load_state_dict(state)
    assert restored.stats.scale == INIT / 2


class Weights(pl.Callback):
    """Saves each rank's weights at the end (ddp_spawn runs training in child processes)."""

    def __init__(self, out) -> None:
        self.out = out

    def on_train_end(self, trainer, pl_module):
        torch.save(pl_module.state_dict(), self.out / f"rank{trainer.global_rank}.pt")


@pytest.mark.slow
@pytest.mark.distributed
def test_ddp_one_rank_overflowing_skips_the_step_on_every_rank(tmp_path):
    """Two CPU processes (gloo); only rank 1's gradient is inf, after the all-reduce, yet both
    skip (rank 0 logs it): the LossScaler all-reduces its decision, so the replicas stay equal."""
    precision = AmpkitPrecision("fp16", scaler=scaler())
    module = Module()
    module.grad_inf = (1, {1})
    _, rows, _ = fit(
        tmp_path,
        module,
        precision,
        strategy="ddp_spawn",
        devices=2,
        max_steps=STEPS // 2,
        callbacks=[Weights(tmp_path)],
    )
    assert column(rows, SKIPPED_STEPS) == [0, 1, 1]  # rank 0's own gradients were finite
    assert column(rows, LOSS_SCALE) == [INIT, INIT / 2, INIT / 2]
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), key


def test_bf16_true_optimizer_follows_the_lr_scheduler(tmp_path):
    precision = AmpkitPrecision("bf16-true")
    module = Module(lr=0.1)
    module.schedule = True
    trainer, _, _ = fit(tmp_path, module, precision, max_steps=3, callback=False)
    (optimizer,) = trainer.optimizers
    assert type(optimizer).__name__ == "CompensatedOptimizer"
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1 / 8)
