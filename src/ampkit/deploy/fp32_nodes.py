"""Which modules an export keeps in fp32: the user's list, or what the doctor flags.

With ``keep_fp32=None`` :func:`ampkit.export` asks :func:`ampkit.diagnose` (one fp32 step on
the example inputs) and keeps every module with a *forward* finding in the target precision:
overflow, underflow or precision loss of its activations. Backward findings (gradients) do not
matter for inference. The loss the doctor needs is a stand-in, the mean square of the first
floating output: the doctor measures activations in the forward pass, which do not depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from ampkit.deploy.signature import FlatModel, Signature

__all__ = ["doctor_keep_fp32"]


def doctor_keep_fp32(
    model: nn.Module,
    signature: Signature,
    precision: str,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(modules to keep in fp32, notes)`` from one :func:`ampkit.diagnose` step (its
    progress passed on to ``progress`` with its stages prefixed ``"doctor: "``)."""
    from ampkit.doctor import diagnose

    if precision == "fp32":
        return (), ()
    if not any(p.requires_grad for p in model.parameters()):
        return (), (
            "the doctor was not run: no parameter requires grad, so it cannot measure the "
            "model; pass keep_fp32=[...] to keep modules in fp32",
        )
    flat = FlatModel(model, signature)
    with torch.no_grad():
        if not any(t.is_floating_point() for t in flat(*signature.inputs)):
            return (), ("the doctor was not run: the model has no floating-point output",)

    def closure() -> torch.Tensor:
        outputs = [t for t in flat(*signature.inputs) if t.is_floating_point()]
        return outputs[0].float().square().mean()

    report = diagnose(
        model,
        closure,
        precision,
        steps=1,
        with_precision_map=False,
        progress=None if progress is None else lambda s, d, t: progress(f"doctor: {s}", d, t),
    )
    flagged: Sequence[str] = [
        f.module
        for f in report.findings
        if f.phase == "forward" and f.precision == precision and f.module
    ]
    keep = tuple(dict.fromkeys(flagged))
    notes = tuple(
        f"doctor: {f.message} (kept {f.module} in fp32)"
        for f in report.findings
        if f.phase == "forward" and f.precision == precision and f.module in keep
    )
    return keep, notes
