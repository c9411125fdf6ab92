"""Model FLOPs of a training step, and the device peaks that turn them into MFU.

Model FLOPs count the matrix multiplications a step needs (forward and backward), not what
the kernels happen to execute, so MFU compares fairly across precisions and kernels.

GPT (closed form, as in PaLM's appendix B): ``6 * N * tokens + 12 * L * d * T * tokens``, with
``N`` the matmul parameters (every Linear weight; embeddings are lookups), ``L`` layers, ``d``
the width and ``T`` the sequence length. The attention term counts ``Q K^T`` and ``A V`` in
full, as the usual MFU convention does, even though causal kernels can skip half.

Other models: :func:`count_train_flops` runs one forward and backward under
``torch.utils.flop_counter.FlopCounterMode``, with attention forced to the math kernel so it is
counted too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

__all__ = ["PEAK_FLOPS", "count_train_flops", "gpt_train_flops", "mfu", "peak_flops"]

#: Dense (no sparsity) peak FLOP/s from the vendors' data sheets, by a substring of
#: ``torch.cuda.get_device_name()``, checked in this order. Keys: ``bf16``/``fp16`` (tensor
#: cores), ``tf32`` (fp32 matmuls on tensor cores), ``fp32`` (CUDA cores).
PEAK_FLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H200", {"bf16": 989e12, "fp16": 989e12, "tf32": 494.5e12, "fp32": 67e12}),
    ("H100 PCIe", {"bf16": 756e12, "fp16": 756e12, "tf32": 378e12, "fp32": 51e12}),
    ("H100", {"bf16": 989e12, "fp16": 989e12, "tf32": 494.5e12, "fp32": 67e12}),
    ("A100", {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12}),
    ("L40S", {"bf16": 362e12, "fp16": 362e12, "tf32": 183e12, "fp32": 91.6e12}),
    ("A10", {"bf16": 125e12, "fp16": 125e12, "tf32": 62.5e12, "fp32": 31.2e12}),
    ("L4", {"bf16": 121e12, "fp16": 121e12, "tf32": 60e12, "fp32": 30.3e12}),
    ("V100", {"fp16": 125e12, "fp32": 15.7e12}),
    ("T4", {"fp16": 65e12, "fp32": 8.1e12}),
)


def gpt_train_flops(model: nn.Module, batch_size: int, seq_len: int) -> float:
    """Model FLOPs of one training step of the built-in GPT on ``batch_size x seq_len``.

    ``model`` must have ``config.n_layer`` and ``config.n_embd`` (the built-in
    :class:`~ampkit.models.gpt.GPT` does).
    """
    from ampkit.models.gpt import train_flops

    return train_flops(model, batch_size, seq_len)


def count_train_flops(step: Callable[[], Any]) -> float:
    """FLOPs ``FlopCounterMode`` counts while ``step()`` runs (a forward and a backward).

    Attention runs on the math kernel here (the fused CPU kernel is not counted by the flop
    counter); the kernel choice is restored afterwards.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        step()
    return float(counter.get_total_flops())


def peak_flops(device_name: str, precision: str, tf32: bool = False) -> float | None:
    """Dense peak FLOP/s of a CUDA device for ``precision``, or None when not in the table.

    fp32 uses the TF32 tensor-core peak when ``tf32`` is on (matmuls then run there). fp8 and
    bf16-true are measured against the bf16 peak (fp8 MFU as torchtitan reports it).
    """
    precision = {"fp8": "bf16", "bf16-true": "bf16"}.get(precision, precision)
    for key, peaks in PEAK_FLOPS:
        if key.lower() in device_name.lower():
            if precision == "fp32":
                return peaks.get("tf32") if tf32 else peaks.get("fp32")
            return peaks.get(precision)
    return None


def mfu(flops_per_step: float | None, step_seconds: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation: achieved model FLOP/s over the peak; None when unknown."""
    if flops_per_step is None or peak is None or step_seconds <= 0:
        return None
    return flops_per_step / step_seconds / peak
