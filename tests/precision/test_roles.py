"""ampkit.precision.roles: MoE routers found by the top-k over experts they feed (a
hand-written MoE and Hugging Face's tiny Mixtral and Qwen2-MoE built from configs), the LM head,
and the routers' top-k agreement between two runs."""

from __future__ import annotations

import os

import pytest
import torch
from _models import MoENet
from torch import nn

from ampkit.precision.fp32_modules import keep_fp32
from ampkit.precision.roles import find_roles, router_topk, topk_agreement

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def test_the_gate_feeding_the_topk_is_the_router_and_lm_head_the_head():
    net, x = MoENet(), torch.randn(64, 8)
    roles = find_roles(net, lambda: net(x))
    assert roles.routers == ("moe.gate",) and roles.head == "lm_head"
    assert roles.names == ("moe.gate", "lm_head")
    assert find_roles(net).routers == ()  # without a forward: the head only


def test_agreement_is_one_for_the_same_run_and_counts_changed_tokens():
    net, x = MoENet(), torch.randn(64, 8)
    first = router_topk(net, lambda: net(x))
    assert topk_agreement(first, router_topk(net, lambda: net(x))) == 1.0
    flipped = [(name, picks.flip(0)) for name, picks in first]
    same = (first[0][1].sort(-1).values == flipped[0][1].sort(-1).values).all(-1).float().mean()
    assert topk_agreement(first, flipped) == pytest.approx(float(same))


def tiny_moe(kind: str) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    common = dict(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts_per_tok=2,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    if kind == "mixtral":
        config = transformers.MixtralConfig(num_local_experts=8, **common)
        return transformers.MixtralForCausalLM(config).eval()
    config = transformers.Qwen2MoeConfig(
        num_experts=8, moe_intermediate_size=64, shared_expert_intermediate_size=64, **common
    )
    return transformers.Qwen2MoeForCausalLM(config).eval()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mixtral", "qwen2_moe"])
def test_hf_tiny_moe_routers_are_found_and_bf16_changes_some_picks(kind):
    model = tiny_moe(kind)
    ids = torch.randint(0, 256, (8, 64), generator=torch.Generator().manual_seed(1))
    roles = find_roles(model, lambda: model(input_ids=ids))
    assert roles.routers == ("model.layers.0.mlp.gate", "model.layers.1.mlp.gate")
    assert roles.head == "lm_head"
    reference = router_topk(model, lambda: model(input_ids=ids))
    assert [r for r, _ in reference] == list(roles.routers)
    assert reference[0][1].shape == (8 * 64, 2)

    def bf16():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(input_ids=ids)

    low = topk_agreement(reference, router_topk(model, bf16))
    with keep_fp32(model, list(roles.routers)):
        kept = topk_agreement(reference, router_topk(model, bf16))
    assert 0.9 < low <= kept <= 1.0


def test_a_model_without_router_like_modules_is_not_run():
    calls = []
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    roles = find_roles(net, lambda: calls.append(1))
    assert roles.routers == () and roles.head is None and calls == []
