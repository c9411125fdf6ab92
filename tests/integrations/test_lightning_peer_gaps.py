"""What Lightning's own precision-plugin tests found missing in the ampkit plugins, each checked
here: a settable ``scaler``, bf16-true weights built in bf16 inside ``module_init_context``, the
warning when bf16-true leaves no bf16 layer, and Fabric (refused for the Trainer plugin,
supported by ``AmpkitFabricPrecision``, bitwise equal to Fabric's own mixed precision)."""

from __future__ import annotations

import math
import warnings
from unittest.mock import Mock

import pytest
import torch
from torch import nn

pl = pytest.importorskip(
    "lightning.pytorch",
    reason="the Lightning tests need lightning: pip install 'ampkit[lightning]'",
)
fabric_mod = pytest.importorskip("lightning.fabric")

import ampkit  # noqa: E402
from ampkit.errors import ConfigurationError, PrecisionWarning  # noqa: E402
from ampkit.integrations.lightning import AmpkitFabricPrecision, AmpkitPrecision  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*fp16.*:ampkit.errors.PrecisionWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning:lightning"),
]


def test_scaler_is_settable_to_a_loss_scaler_or_a_wrapper():
    plugin = AmpkitPrecision("fp16", "cpu")
    mine = ampkit.LossScaler("cpu", init_scale=2.0**8)
    plugin.scaler = mine
    assert plugin.scaler is mine and plugin.mp.scaler is mine
    wrapper = Mock(wraps=mine)
    plugin.scaler = wrapper
    assert plugin.scaler is wrapper


@pytest.mark.parametrize(
    ("precision", "value", "match"),
    [
        ("fp16", torch.amp.GradScaler("cpu"), "GradScaler"),
        ("fp16", object(), "object"),
        ("bf16", ampkit.LossScaler("cpu"), "enabled=True"),
    ],
)
def test_scaler_assignment_refuses_what_the_plugin_cannot_step_with(precision, value, match):
    plugin = AmpkitPrecision(precision, "cpu")
    before = plugin.scaler
    with pytest.raises(ConfigurationError, match=match):
        plugin.scaler = value
    assert plugin.scaler is before


def test_bf16_true_module_init_context_builds_weights_in_bf16():
    plugin = AmpkitPrecision("bf16-true", "cpu")
    with plugin.module_init_context():
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    assert torch.get_default_dtype() == torch.float32
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    bf16_head = model[2].weight.detach().clone()
    plugin.convert_module(model)
    assert model[0].weight.dtype == torch.bfloat16
    # the head is an fp32 island, starting from its bf16-rounded initial values
    assert model[2].weight.dtype == torch.float32
    assert torch.equal(model[2].weight, bf16_head.float())


def test_autocast_context_manager_is_the_policys_autocast_under_lightnings_name():
    plugin = AmpkitPrecision("bf16", "cpu")
    layer = nn.Linear(2, 1)
    with plugin.autocast_context_manager():
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        with torch.no_grad():
            layer(torch.randn(1, 2))
        loss = layer(torch.randn(1, 2)).mean()
    loss.backward()  # a no_grad forward inside does not cut the graph of the next one
    assert layer.weight.grad is not None


def test_other_precisions_leave_module_init_context_alone():
    plugin = AmpkitPrecision("bf16", "cpu")
    with plugin.module_init_context():
        assert torch.get_default_dtype() == torch.float32


def test_bf16_true_under_the_trainer_builds_configure_model_in_bf16(tmp_path):
    seen: dict[str, torch.dtype] = {}

    class Built(pl.LightningModule):
        def configure_model(self):
            self.body = nn.Linear(4, 8)
            self.head = nn.Linear(8, 1)
            seen["inside"] = self.body.weight.dtype

        def training_step(self, batch, _):
            return self.head(self.body(batch[0].to(torch.bfloat16)).float()).float().mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    x = torch.randn(8, 4)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=4)
    model = Built()
    trainer = pl.Trainer(
        plugins=[AmpkitPrecision("bf16-true", "cpu")],
        accelerator="cpu",
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(model, loader)
    assert seen["inside"] == torch.bfloat16
    assert model.body.weight.dtype == torch.bfloat16 and model.head.weight.dtype == torch.float32


def test_bf16_true_warns_once_when_no_layer_ends_up_in_bf16():
    plugin = AmpkitPrecision("bf16-true", "cpu")
    with pytest.warns(PrecisionWarning, match="no parameter") as record:
        plugin.convert_module(nn.Linear(2, 2))  # its only Linear is the final projection
    assert len(record) == 1 and "\n" not in str(record[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plugin.convert_module(nn.Sequential(nn.Linear(2, 4), nn.Linear(4, 2)))


def test_trainer_plugin_under_fabric_is_refused_in_one_line():
    fabric = fabric_mod.Fabric(accelerator="cpu", devices=1, plugins=[AmpkitPrecision("bf16")])
    model, opt = fabric.setup(nn.Linear(3, 1), torch.optim.SGD(nn.Linear(3, 1).parameters()))
    loss = model(torch.randn(2, 3)).float().sum()
    with pytest.raises(ConfigurationError, match="AmpkitFabricPrecision"):
        fabric.backward(loss)


def _fabric_run(plugin, inject_at: int | None = None) -> list[torch.Tensor]:
    fabric = fabric_mod.Fabric(accelerator="cpu", devices=1, plugins=[plugin])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, opt = fabric.setup(model, opt)
    g = torch.Generator().manual_seed(1)
    for step in range(6):
        x, y = torch.randn(8, 6, generator=g), torch.randn(8, 1, generator=g)
        loss = nn.functional.mse_loss(model(x).float(), y)
        fabric.backward(loss)
        if step == inject_at:
            model.module[0].bias.grad[0] = math.inf
        fabric.clip_gradients(model, opt, max_norm=1.0, error_if_nonfinite=False)
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_fabric_plugin_is_bitwise_fabrics_own_mixed_precision(precision):
    amp = fabric_mod.plugins.MixedPrecision
    if precision == "fp16":
        ours = AmpkitFabricPrecision(
            "fp16", "cpu", scaler=ampkit.LossScaler("cpu", init_scale=2.0**10, growth_interval=2)
        )
        theirs = amp("16-mixed", "cpu", torch.amp.GradScaler("cpu", 2.0**10, growth_interval=2))
        inject = 3
    else:
        ours, theirs, inject = AmpkitFabricPrecision("bf16", "cpu"), amp("bf16-mixed", "cpu"), None
    got, want = _fabric_run(ours, inject), _fabric_run(theirs, inject)
    for p, q in zip(got, want, strict=True):
        assert torch.equal(p, q)
    if precision == "fp16":
        assert ours.stats.skipped_steps == 1 and ours.stats.steps == 6


def test_fabric_plugin_refuses_fp32_and_a_scaler_under_bf16():
    with pytest.raises(ConfigurationError, match="fp32"):
        AmpkitFabricPrecision("fp32", "cpu")
    with pytest.raises(ConfigurationError, match="scaler"):
        AmpkitFabricPrecision("bf16", "cpu", scaler=ampkit.LossScaler("cpu"))
