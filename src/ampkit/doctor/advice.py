"""Advice a machine can act on: only the precisions it runs well.

The numerics (:func:`ampkit.doctor.findings.recommend`) say which precisions keep a model
finite and accurate; the hardware says which of them are fast here. fp16 autocast on a CPU
runs emulated kernels (about 60x slower per step than bf16 on a CPU with AVX512-BF16), and
on a CPU without native bf16 every low precision is slower than fp32: advice to train in them
would be correct numerics and a slower run. :func:`runs_well` reads the same hardware facts as
``--precision auto`` (:func:`ampkit.precision.policy.resolve_precision`), so the doctor never
advises what ``auto`` would refuse to pick for speed.
"""

from __future__ import annotations

from ampkit.precision.hardware import HardwareInfo
from ampkit.precision.policy import resolve_precision

__all__ = ["runs_well", "slow_here"]

#: Devices whose low-precision units compute fp16 as well as bf16 where they have bf16
#: (tensor cores, AMD matrix cores, Intel XMX): fp16 is fast wherever bf16 is.
_FP16_WHEREVER_BF16 = ("cuda", "rocm")


def runs_well(hardware: HardwareInfo) -> tuple[str, ...]:
    """The precisions ``hardware`` computes fast, best first; ``fp32`` always last.

    ``auto``'s pick first (bf16 on a CPU with native bf16 or an Ampere+ GPU, fp16 on Volta,
    Apple and fp16-only Intel GPUs), then fp16 where the same units run it (NVIDIA and AMD
    GPUs with bf16; Intel GPUs that report fp16), then fp32. Never fp16 on a CPU; nothing but
    fp32 where ``auto`` picks fp32 (a CPU without native bf16, a GPU without tensor cores).
    """
    auto = resolve_precision("auto", hardware.device, hardware=hardware).precision
    if auto == "fp32":
        return ("fp32",)
    well = [auto]
    backend = hardware.backend
    if auto == "bf16" and (
        backend in _FP16_WHEREVER_BF16 or (backend == "xpu" and hardware.xpu_fp16 is not False)
    ):
        well.append("fp16")
    return (*well, "fp32")


def slow_here(precision: str, hardware: HardwareInfo) -> str:
    """Why ``precision`` is not advised on ``hardware``: one clause for a reason line."""
    if precision == "fp16" and hardware.device.type == "cpu":
        return (
            "fp16 on a CPU is slow: autocast runs emulated fp16 kernels there (measured about "
            "60x slower per step than bf16 on a CPU with AVX512-BF16, and slower than fp32 "
            "everywhere)"
        )
    auto = resolve_precision("auto", hardware.device, hardware=hardware)
    return f"{precision} is not fast on this device ({auto.reason.rstrip('.')})"
