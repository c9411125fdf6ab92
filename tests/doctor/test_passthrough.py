"""Pass-through modules (Dropout, Identity, Flatten, DropPath, ReLU-like) have no findings of
their own: what is seen there is the producer's, and the first inf/NaN is still the real one."""

from __future__ import annotations

import torch
from torch import nn

import ampkit
from ampkit.doctor import diagnose


class DropPath(nn.Module):
    """Stochastic depth as timm writes it (no parameters; ``drop_prob=0`` forwards ``x``)."""

    def __init__(self, drop_prob: float = 0.0) -> None:
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep = torch.rand(x.shape[0], 1, device=x.device) >= self.drop_prob
        return x * keep / (1 - self.drop_prob)


class Chain(nn.Module):
    """``fc`` makes activations of ~1e-9 (all zero in fp16), then, with ``passthrough``, five
    modules that only forward them, then ``head``; without, ``head`` reads ``fc`` directly."""

    def __init__(self, passthrough: bool) -> None:
        super().__init__()
        self.passthrough = passthrough
        self.fc = nn.Linear(8, 16)
        self.drop = nn.Dropout(0.0)
        self.ident = nn.Identity()
        self.unflat = nn.Unflatten(1, (4, 4))
        self.flat = nn.Flatten()
        self.path = DropPath(0.0)
        self.head = nn.Linear(16, 4)
        with torch.no_grad():
            self.fc.weight.mul_(1e-9)
            self.fc.bias.mul_(1e-9)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if self.passthrough:
            h = self.path(self.flat(self.unflat(self.ident(self.drop(h)))))
        return self.head(h)


def _diagnose(model: nn.Module, precision: str = "fp16", **kwargs):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 8, generator=g), torch.randint(0, 4, (32,), generator=g)
    return diagnose(
        model,
        lambda: nn.functional.cross_entropy(model(x), y),
        precision,
        steps=1,
        with_precision_map=False,
        **kwargs,
    )


def _keys(report) -> list[tuple[str, str, str]]:
    return [(f.module, f.kind, f.phase) for f in report.findings]


def test_pass_through_modules_change_no_finding_against_a_model_without_them():
    torch.manual_seed(0)
    with_them = _diagnose(Chain(passthrough=True))
    torch.manual_seed(0)
    control = _diagnose(Chain(passthrough=False))
    assert ("fc", "underflow", "forward") in _keys(control)
    assert _keys(with_them) == _keys(control)
    names = {"drop", "ident", "unflat", "flat", "path"}
    assert {r.name for r in with_them.rows if r.pass_through} == names
    assert not any(r.pass_through for r in control.rows)
    assert with_them.to_dict()["rows"][1]["pass_through"] is False  # fc, a compute module


class InlineBlock(nn.Module):
    """The block's own code scales ``fc``'s output by 1e-9 and hands it to ``drop_path``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop_path = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop_path(self.fc(x) * 1e-9)


class InlineNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = InlineBlock()
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


def test_a_value_the_parent_computed_is_the_parents_finding():
    torch.manual_seed(0)
    report = _diagnose(InlineNet())
    assert not [f for f in report.findings if f.module == "block.drop_path"]
    moved = [f for f in report.findings if f.through == "block.drop_path"]
    assert [(f.module, f.kind, f.phase) for f in moved] == [("block", "underflow", "forward")]
    # |fc(x)| * 1e-9 < 3e-8, half fp16's smallest subnormal: every value rounds to zero
    assert moved[0].numbers["underflow_fraction"] == 1.0
    assert moved[0].module_type == "InlineBlock"
    assert "measured at block.drop_path (Identity)" in moved[0].message
    assert moved[0].to_dict()["through"] == "block.drop_path"


class Overflowing(nn.Module):
    """``fc`` outputs 4e4 everywhere (fits fp16); ``drop`` (p=0.5, training) doubles the kept
    values to 8e4 (overflows fp16)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 64)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(64, 4)
        with torch.no_grad():
            self.fc.weight.zero_()
            self.fc.bias.fill_(4e4)
            self.head.weight.mul_(1e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.fc(x)))


def test_an_overflow_a_dropout_scales_past_the_limit_is_its_producers():
    torch.manual_seed(0)
    report = _diagnose(Overflowing())
    assert "drop" not in {f.module for f in report.findings}
    over = [f for f in report.findings if f.kind == "overflow" and f.phase == "forward"]
    assert [(f.module, f.through) for f in over] == [("fc", "drop")]
    assert over[0].numbers["max_abs"] == 8e4
    assert "drop" not in report.recommendation.keep_fp32


class Exploding(nn.Module):
    """``fc``'s weights make inf in fp32 itself; a Dropout and a head follow."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(8, 4)
        with torch.no_grad():
            self.fc.weight.fill_(3e38)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.fc(x)))


def test_the_first_non_finite_module_is_the_linear_not_the_dropout_after_it():
    torch.manual_seed(0)
    model = Exploding()
    report = _diagnose(model)
    first = report.findings[0]
    assert (first.module, first.kind, first.precision) == ("fc", "non-finite", "fp32")
    assert first.through is None
    assert "drop" not in {f.module for f in report.findings}
    assert report.recommendation.precision is None
    x = torch.randn(4, 8)
    with ampkit.detect_nonfinite(model) as probe:
        model(x).sum().backward()
    assert probe.first is not None and probe.first.module == "fc"


class Scale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1e-3


class WeightedDropout(nn.Module):
    """Named like a dropout, but with a parameter: it computes."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool1d(2)
        self.gelu = nn.GELU()
        self.scale = Scale()
        self.gain = WeightedDropout()
        self.head = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.gain(self.scale(self.gelu(self.relu(self.fc(x)) - 0.5)))
        return self.head(self.pool(h.unsqueeze(1)).squeeze(1))


def test_pass_through_by_measurement_keeps_the_range_and_has_no_parameters():
    torch.manual_seed(0)
    report = _diagnose(Mixed(), precision="bf16")
    through = {r.name: r.pass_through for r in report.rows}
    assert through == {
        "": False,
        "fc": False,
        "relu": True,  # its outputs are some of its inputs, or 0
        "pool": True,  # the maximum of its inputs
        "gelu": False,  # GELU(-x) makes values smaller than any input
        "scale": False,  # x * 1e-3 shrinks every value
        "gain": False,  # a parameter: it computes
        "head": False,
    }
