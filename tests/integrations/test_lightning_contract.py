"""The dtype contract in a real Lightning Trainer on the CPU: a model left in bf16 under
Lightning's own ``bf16-mixed`` and a plain AdamW warns once through AmpkitCallback."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

pl = pytest.importorskip(
    "lightning.pytorch",
    reason="the Lightning tests need lightning: pip install 'ampkit[lightning]'",
)

from ampkit.errors import ConfigurationError, PrecisionWarning  # noqa: E402
from ampkit.integrations.lightning import AmpkitCallback, AmpkitPrecision  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:lightning")


class Module(pl.LightningModule):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(dtype)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x.to(self.net[0].weight.dtype)).float(), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(8, 8, generator=g)
        return torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(x, x[:, :1]), batch_size=4
        )


def fit(tmp_path, module, cb, **kwargs):
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=2,
        logger=pl.loggers.CSVLogger(str(tmp_path), name="run", version=0),
        callbacks=[cb],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )
    trainer.fit(module)
    return trainer


def pure_bf16_warnings(caught) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, PrecisionWarning) and "pure bf16" in str(w.message)
    ]


def test_bf16_model_under_bf16_mixed_warns_once_and_logs_the_contract(tmp_path):
    cb = AmpkitCallback()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(tmp_path, Module(torch.bfloat16), cb, precision="bf16-mixed")
    (message,) = pure_bf16_warnings(caught)
    assert "Lightning precision 'bf16-mixed'" in message and "model.float()" in message
    assert [c.kind for c in cb.contracts] == ["pure-bf16"]
    hparams = (tmp_path / "run" / "version_0" / "hparams.yaml").read_text()
    assert "ampkit/contract: pure-bf16" in hparams


def test_strict_makes_it_an_error(tmp_path):
    with pytest.raises(ConfigurationError, match="strict=True"):
        fit(tmp_path, Module(torch.bfloat16), AmpkitCallback(strict=True), precision="bf16-mixed")


def test_lightning_bf16_true_was_asked_for_and_says_nothing(tmp_path):
    cb = AmpkitCallback(strict=True)
    fit(tmp_path, Module(torch.float32), cb, precision="bf16-true")
    assert [c.kind for c in cb.contracts] == ["pure-bf16"]


def test_ampkit_plugin_records_a_mixed_contract_with_an_fp32_master(tmp_path):
    plugin = AmpkitPrecision("bf16", "cpu")
    cb = AmpkitCallback(strict=True)
    fit(tmp_path, Module(torch.float32), cb, plugins=[plugin])
    assert plugin.contract.kind == "mixed" and plugin.contract.master == "fp32 weights"
    assert [c.kind for c in cb.contracts] == ["mixed"]
