"""ampkit doctor lists the MoE routers and the LM head, their FLOP share and the routers'
top-k agreement fp32 vs bf16."""

from __future__ import annotations

import torch
from _models import MoENet

from ampkit.doctor import diagnose


def test_report_lists_routers_head_flop_share_and_agreement():
    net, x = MoENet(), torch.randn(64, 8)
    report = diagnose(net, lambda: net(x).pow(2).mean(), "bf16", steps=1, with_precision_map=False)
    roles = report.to_dict()["roles"]
    assert roles["routers"] == ["moe.gate"] and roles["head"] == "lm_head"
    # FLOPs of the forward per token: inp 8*16, gate 16*4, each of the 4 experts 16*16 once
    # per top-k slot (2), head 16*32: the shares in closed form
    total = 8 * 16 + 16 * 4 + 2 * 4 * 16 * 16 + 16 * 32
    assert roles["routers_flops_share"] == 16 * 4 / total
    assert roles["head_flops_share"] == 16 * 32 / total
    assert 0.0 < roles["router_topk_agreement"] <= 1.0
    assert "router top-k agreement with fp32" in report.to_text()


def test_a_model_without_routers_or_head_has_no_roles_section():
    net = torch.nn.Sequential(torch.nn.Linear(8, 8))
    report = diagnose(net, lambda: net(torch.ones(2, 8)).sum(), "bf16", steps=1)
    assert "roles" not in report.to_dict()
