"""MixedPrecision's clipping is bitwise the hand-written loop's
``clip_grad_norm_(model.parameters())`` with a grouped optimizer: a GPT-style model whose AdamW
has a weight-decay group and a no-decay group built from sorted parameter names (the way
minGPT configures its optimizer), so the groups' order is not the model's."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ampkit import MixedPrecision
from ampkit.precision.engine import clip_order

STEPS, MAX_NORM = 4, 0.5


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mix = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.out(torch.nn.functional.gelu(self.mix(self.norm(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 32, width: int = 16, depth: int = 2) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(8, width)
        self.blocks = nn.Sequential(*(Block(width) for _ in range(depth)))
        self.final_norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1]))
        return self.head(self.final_norm(self.blocks(x)))


def decay_split_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """AdamW with weight decay on Linear weights only; each group's names sorted."""
    decay, no_decay = set(), set()
    for module_name, module in model.named_modules():
        for name, _ in module.named_parameters(recurse=False):
            full = f"{module_name}.{name}" if module_name else name
            linear_weight = isinstance(module, nn.Linear) and name == "weight"
            (decay if linear_weight else no_decay).add(full)
    params = dict(model.named_parameters())
    groups = [
        {"params": [params[n] for n in sorted(decay)], "weight_decay": 0.1},
        {"params": [params[n] for n in sorted(no_decay)], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=3e-3)


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [
        (torch.randint(0, 32, (4, 8), generator=g), torch.randint(0, 32, (4, 8), generator=g))
        for _ in range(STEPS)
    ]


def loss_of(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(idx).float().flatten(0, 1), targets.flatten())


def plain_loop(dtype: torch.dtype | None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    torch.manual_seed(0)
    model = TinyGPT()
    opt = decay_split_optimizer(model)
    norms = []
    for idx, targets in batches():
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = loss_of(model, idx, targets)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM))
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()], norms


def engine_loop(precision: str, how: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    torch.manual_seed(0)
    model = TinyGPT()
    opt = decay_split_optimizer(model)
    norms = []
    with MixedPrecision(precision, "cpu", max_grad_norm=MAX_NORM) as mp:
        if how == "prepare_model":
            model = mp.prepare_model(model)
        for idx, targets in batches():
            with mp.accumulate(model) if how == "accumulate" else torch.enable_grad():
                with mp.autocast():
                    loss = loss_of(model, idx, targets)
                mp.backward(loss)
            result = mp.step(opt)
            norms.append(result.grad_norm_tensor)
    return [p.detach().clone() for p in model.parameters()], norms


@pytest.mark.parametrize("how", ["prepare_model", "accumulate"])
@pytest.mark.parametrize(("precision", "dtype"), [("fp32", None), ("bf16", torch.bfloat16)])
def test_clipping_is_bitwise_the_plain_loop_on_a_weight_decay_split(precision, dtype, how):
    want_params, want_norms = plain_loop(dtype)
    got_params, got_norms = engine_loop(precision, how)
    for got, want in zip(got_norms, want_norms, strict=True):
        assert torch.equal(got, want)
    for got, want in zip(got_params, want_params, strict=True):
        assert torch.equal(got, want)


def test_clip_order_takes_the_models_order_then_the_optimizers_other_parameters():
    model = TinyGPT()
    extra = nn.Parameter(torch.zeros(3))
    opt = decay_split_optimizer(model)
    opt.add_param_group({"params": [extra]})
    grouped = [p for group in opt.param_groups for p in group["params"]]
    assert [id(p) for p in clip_order([opt])] == [id(p) for p in grouped]
    ordered = clip_order([opt], [model])
    assert [id(p) for p in ordered] == [id(p) for p in model.parameters()] + [id(extra)]
