"""Facts about floating-point formats, computed from ``torch.finfo`` (never typed in).

>>> fp16 = number_format(torch.float16)
>>> fp16.max, fp16.mantissa_bits, fp16.needs_loss_scaling
(65504.0, 10, True)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ampkit._text_table import text_table

__all__ = ["NumberFormat", "format_table", "number_format", "number_formats"]


def _fp8_dtypes() -> list[tuple[str, torch.dtype]]:
    names = [("fp8_e4m3", "float8_e4m3fn"), ("fp8_e5m2", "float8_e5m2")]
    return [(label, getattr(torch, attr)) for label, attr in names if hasattr(torch, attr)]


@dataclass(frozen=True)
class NumberFormat:
    """Range and precision of one floating-point format.

    Attributes:
        name: short name (``fp32``, ``fp16``, ``bf16``, ``fp8_e4m3``, ``fp8_e5m2``).
        dtype: the torch dtype's name.
        bits: total width.
        exponent_bits, mantissa_bits: field widths (the sign is one bit).
        max: largest finite value.
        smallest_normal: smallest positive normal value.
        smallest_subnormal: smallest positive value at all (below it, values round to zero).
        eps: distance from 1.0 to the next larger value.
        decimal_digits: significant decimal digits kept, ``(mantissa_bits + 1) * log10(2)``.
        has_inf: whether the format encodes infinity (fp8 e4m3fn saturates to NaN instead).
        needs_loss_scaling: the exponent range is narrower than fp32's, so small gradients
            underflow unless scaled (fp16, fp8); bf16 shares fp32's exponent and does not.
    """

    name: str
    dtype: str
    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    smallest_subnormal: float
    eps: float
    decimal_digits: float
    has_inf: bool
    needs_loss_scaling: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        return asdict(self)


_FP32_EXPONENT_BITS = 8


def number_format(dtype: torch.dtype, name: str | None = None) -> NumberFormat:
    """Compute the :class:`NumberFormat` of a floating-point ``dtype`` from ``torch.finfo``."""
    info = torch.finfo(dtype)
    mantissa = round(-math.log2(info.eps))
    exponent = info.bits - 1 - mantissa
    probe = torch.tensor(float("inf")).to(dtype)
    return NumberFormat(
        name=name or str(dtype).removeprefix("torch."),
        dtype=str(dtype).removeprefix("torch."),
        bits=info.bits,
        exponent_bits=exponent,
        mantissa_bits=mantissa,
        max=float(info.max),
        smallest_normal=float(info.smallest_normal),
        smallest_subnormal=float(info.smallest_normal) * float(info.eps),
        eps=float(info.eps),
        decimal_digits=round((mantissa + 1) * math.log10(2), 2),
        has_inf=bool(torch.isinf(probe.float())),
        needs_loss_scaling=exponent < _FP32_EXPONENT_BITS,
    )


def number_formats() -> list[NumberFormat]:
    """fp32, fp16, bf16 and (where this torch has them) fp8 e4m3 and e5m2."""
    dtypes = [("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)]
    return [number_format(dtype, name) for name, dtype in dtypes + _fp8_dtypes()]


def format_table(formats: list[NumberFormat]) -> str:
    """A fixed-width text table, one row per format."""
    header = (
        "format",
        "bits",
        "exp",
        "mant",
        "max",
        "min normal",
        "min subnormal",
        "eps",
        "digits",
        "inf",
        "loss scaling",
    )
    rows = [
        (
            f.name,
            str(f.bits),
            str(f.exponent_bits),
            str(f.mantissa_bits),
            f"{f.max:.6g}",
            f"{f.smallest_normal:.4g}",
            f"{f.smallest_subnormal:.4g}",
            f"{f.eps:.4g}",
            f"{f.decimal_digits:.1f}",
            "yes" if f.has_inf else "no",
            "needed" if f.needs_loss_scaling else "not needed",
        )
        for f in formats
    ]
    return "\n".join(text_table([header, *rows]))
