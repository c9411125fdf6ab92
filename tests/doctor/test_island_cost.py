"""A keep_fp32 recommendation says how much of the compute it keeps in fp32, and when that is
most of it, says so plainly and offers the alternatives."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from ampkit.doctor import NumericsFinding, Recommendation, diagnose
from ampkit.doctor.compute import IslandShare, island_share
from ampkit.doctor.findings import MOSTLY_FP32, with_island_cost
from ampkit.precision.hardware import HardwareInfo

AMPERE = HardwareInfo(
    device=torch.device("cuda", 0), name="Test A100", cuda_capability=(8, 0), cuda_bf16=True
)


def _mlp() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)), torch.randn(8, 16)


def test_island_share_counts_matmul_flops_and_parameters_in_closed_form():
    model, x = _mlp()
    share = island_share(model, lambda: model(x).sum(), ["0"])
    assert (share.flops, share.island_flops) == (2 * 8 * 16 * 32 + 2 * 8 * 32 * 4, 2 * 8 * 16 * 32)
    assert share.flops_share == pytest.approx(0.8)
    assert (share.params, share.island_params) == (16 * 32 + 32 + 32 * 4 + 4, 16 * 32 + 32)
    assert share.share == share.flops_share
    assert island_share(model, lambda: model(x).sum(), []).island_flops == 0
    assert all(p.grad is None for p in model.parameters())


def _loss_finding(module: str, error: float) -> NumericsFinding:
    return NumericsFinding(
        module=module,
        kind="precision-loss",
        phase="forward",
        precision="bf16",
        message=f"{module}: lost",
        numbers={"rel_error": error, "tolerance": 0.05},
    )


def test_mostly_fp32_says_so_and_offers_fp32_the_islands_and_no_islands():
    rec = Recommendation("bf16", None, ("blocks",), ("bf16 loses too much in blocks",))
    finding = _loss_finding("blocks", 0.156)
    share = IslandShare(flops=1000, island_flops=921, params=100, island_params=89)
    out = with_island_cost(rec, share, [finding], all_flagged=["blocks"])
    assert (out.precision, out.keep_fp32) == ("bf16", ("blocks",))  # the fields stay as they were
    assert (out.fp32_compute, out.fp32_params) == (0.921, 0.89)
    text = " ".join(out.reasons)
    assert "keeps 92.1% of the compute in fp32" in text
    assert "89% of the parameters" in text
    assert "build up together in bf16 (15.6%)" in text  # flagged for its children's error
    assert [(a.precision, a.keep_fp32, a.fp32_compute) for a in out.alternatives] == [
        ("fp32", (), 1.0),
        ("bf16", ("blocks",), 0.921),
        ("bf16", (), 0.0),
    ]
    assert "off by 15.6%" in out.alternatives[2].why
    data = json.loads(json.dumps(out.to_dict()))
    assert data["fp32_compute"] == 0.921 and len(data["alternatives"]) == 3
    assert set(data) >= {"precision", "init_scale", "keep_fp32", "reasons", "hardware"}


def test_a_small_island_only_carries_its_share():
    rec = Recommendation("bf16", None, ("head",), ("bf16 loses too much in head",))
    share = IslandShare(flops=1000, island_flops=200, params=100, island_params=10)
    out = with_island_cost(rec, share, [_loss_finding("head", 0.2)])
    assert out.fp32_compute == 0.2 < MOSTLY_FP32
    assert out.reasons == rec.reasons and out.alternatives == ()


def test_an_island_with_its_own_finding_is_not_called_accumulated():
    rec = Recommendation("bf16", None, ("trunk",), ("why",))
    share = IslandShare(flops=10, island_flops=9, params=0, island_params=0)
    out = with_island_cost(
        rec, share, [_loss_finding("trunk", 0.3)], all_flagged=["trunk", "trunk.fc"]
    )
    assert "build up together" not in " ".join(out.reasons)


class Cancelling(nn.Module):
    """``trunk`` subtracts pairs of inputs that differ by ~0.01 around 256: bf16 rounds both to
    256 (its spacing there is 2), so the difference is lost; ``head`` is small."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Linear(64, 64, bias=False)
        self.head = nn.Linear(64, 2)
        with torch.no_grad():
            self.trunk.weight.zero_()
            for i in range(64):
                self.trunk.weight[i, (2 * i) % 64] = 1.0
                self.trunk.weight[i, (2 * i + 1) % 64] = -1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(x))


def test_diagnose_reports_the_share_of_a_trunk_island():
    torch.manual_seed(0)
    model = Cancelling()
    x = 256 + 0.01 * torch.randn(16, 64)
    y = torch.randint(0, 2, (16,))
    report = diagnose(
        model,
        lambda: nn.functional.cross_entropy(model(x), y),
        "bf16",
        steps=1,
        with_precision_map=False,
        hardware=AMPERE,  # runs bf16 well on any test machine: the islands are the subject
    )
    rec = report.recommendation
    assert (rec.precision, rec.keep_fp32) == ("bf16", ("trunk",))
    assert rec.fp32_compute == pytest.approx(64 * 64 / (64 * 64 + 64 * 2))
    assert rec.fp32_params == pytest.approx(64 * 64 / (64 * 64 + 64 * 2 + 2))
    assert [a.precision for a in rec.alternatives] == ["fp32", "bf16", "bf16"]
    text = report.to_text(findings_only=True)
    assert "keeps 97% of the compute in fp32" in text
    assert "fp32 share 97% of the compute" in text and "alternatives:" in text
    data = json.loads(report.to_json())
    assert data["recommendation"]["alternatives"][0]["precision"] == "fp32"
    page = report._repr_html_()
    assert "<th>fp32 share</th><td>97% of the compute" in page and "<th>alternative</th>" in page
    assert all(p.grad is None for p in model.parameters())
