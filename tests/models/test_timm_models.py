"""timm models through MixedPrecision and predict (skipped where timm cannot be imported: it
imports torchvision, which must match the installed torch)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip(
    "timm",
    reason="needs timm and a torchvision matching this torch: pip install 'ampkit[timm]'",
    exc_type=ImportError,
)

import ampkit  # noqa: E402
from ampkit.models.resolve import build_model  # noqa: E402


@pytest.mark.parametrize(
    "spec",
    [
        "timm:resnet18",
        "timm:vit_tiny_patch16_224:img_size=32",
        pytest.param("timm:convnext_atto", marks=pytest.mark.slow),
        pytest.param("timm:efficientnet_b0", marks=pytest.mark.slow),
    ],
)
def test_timm_model_trains_in_bf16_and_predicts(spec):
    built = build_model(spec, batch_size=2)
    opt = torch.optim.SGD(built.model.parameters(), lr=0.01)
    with ampkit.MixedPrecision("bf16", "cpu") as mp:
        with mp.autocast():
            loss = built.loss(built.model, built.example_batch)
        mp.backward(loss)
        assert mp.step(opt).stepped
    images, _ = built.example_batch
    out = ampkit.predict(built.model, images, precision="bf16", device="cpu")
    assert out.dtype == torch.float32 and out.shape[0] == 2
