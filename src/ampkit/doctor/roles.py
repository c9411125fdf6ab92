"""The doctor's ``roles`` section: the MoE routers and the LM head of the model, their share
of the forward FLOPs, and how often the routers pick other experts in the candidate's
autocast than in fp32 (with and without the routers kept in fp32)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ampkit.doctor.compute import island_share
from ampkit.doctor.isolation import preserved_state
from ampkit.precision.fp32_modules import keep_fp32
from ampkit.precision.modes import DoctorSection
from ampkit.precision.roles import find_roles, router_topk, topk_agreement

__all__ = ["roles_section"]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def roles_section(
    model: nn.Module,
    closure: Callable[[], torch.Tensor],
    autocast: torch.dtype,
    device: torch.device,
) -> DoctorSection | None:
    """``roles``: routers and LM head (:func:`~ampkit.precision.roles.find_roles`), each
    group's FLOP share, and the routers' top-k agreement fp32 vs ``autocast``; None when the
    model has neither."""
    with preserved_state(model, device):
        roles = find_roles(model, closure)
        if not roles.names:
            return None
        routers = island_share(model, closure, roles.routers).flops_share if roles.routers else None
        head = island_share(model, closure, [roles.head]).flops_share if roles.head else None
        agreement = kept = None
        low = autocast != torch.float32
        if roles.routers and low:
            reference = router_topk(model, closure)

            def candidate() -> torch.Tensor:
                with torch.autocast(device.type, dtype=autocast):
                    return closure()

            agreement = topk_agreement(reference, router_topk(model, candidate))
            with keep_fp32(model, list(roles.routers)):
                kept = topk_agreement(reference, router_topk(model, candidate))
    name = (
        str(autocast).removeprefix("torch.").replace("bfloat16", "bf16").replace("float16", "fp16")
    )
    lines = [
        f"roles: {len(roles.routers)} MoE router(s) ({_pct(routers)} of the forward FLOPs), "
        f"LM head {roles.head or 'none'} ({_pct(head)}); kept in fp32 by default under 'auto'"
    ]
    if agreement is not None:
        lines.append(
            f"  router top-k agreement with fp32: {_pct(agreement)} under {name} autocast, "
            f"{_pct(kept)} with the routers in fp32"
        )
    data = {
        "routers": list(roles.routers),
        "head": roles.head,
        "routers_flops_share": routers,
        "head_flops_share": head,
        "router_topk_agreement": agreement,
        "router_topk_agreement_fp32_routers": kept,
    }
    return DoctorSection("roles", "\n".join(lines), data)
