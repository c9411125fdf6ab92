"""What the hardware can do for mixed precision, read without side effects.

The probes are small pure functions over plain data (CPU flag sets, compute capabilities) so
tests can ask "what would ampkit pick on an Ampere GPU / a CPU with AMX" without that hardware.
Only :func:`probe` touches the machine.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = [
    "CPU_BF16_FLAGS",
    "HardwareInfo",
    "fp8_capable",
    "cpu_has_native_bf16",
    "probe",
    "read_cpu_flags",
    "torchao_importable",
]

#: CPU feature flags (as spelled in ``/proc/cpuinfo``) that give native bfloat16 arithmetic:
#: AVX512-BF16 dot products (Cooper Lake, Zen 4+) and AMX tiles (Sapphire Rapids+).
CPU_BF16_FLAGS: frozenset[str] = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_has_native_bf16(flags: Iterable[str]) -> bool:
    """Return True when the CPU flags include a native bfloat16 instruction set.

    Args:
        flags: CPU feature flags, e.g. ``read_cpu_flags()`` or a hand-made set in tests.
    """
    return not CPU_BF16_FLAGS.isdisjoint(f.lower() for f in flags)


def read_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """Read the feature flags of the first CPU from ``/proc/cpuinfo``.

    Returns an empty set where the file does not exist (macOS, Windows); on those systems
    :func:`probe` falls back to asking oneDNN whether bf16 kernels are available.
    """
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


@dataclass(frozen=True, kw_only=True)
class HardwareInfo:
    """What one device offers for mixed precision.

    Attributes:
        device: the device described.
        name: a human name (the GPU's or the CPU's model).
        cuda_capability: ``(major, minor)`` compute capability on CUDA, else None.
        cuda_bf16: whether the CUDA device runs bfloat16 (None on CPU).
        cpu_native_bf16: whether the CPU has native bf16 instructions (None on CUDA).
        gpu_arch: the ROCm architecture (``gfx942`` on MI300), None on NVIDIA and CPUs.
        torchao_available: whether ``torchao`` (fp8 training) is importable; None: not asked.
    """

    device: torch.device
    name: str
    cuda_capability: tuple[int, int] | None = None
    cuda_bf16: bool | None = None
    cpu_native_bf16: bool | None = None
    gpu_arch: str | None = None
    torchao_available: bool | None = None


def fp8_capable(info: HardwareInfo) -> bool:
    """Whether the GPU has fp8 tensor cores: CUDA compute capability 8.9+ (Ada, Hopper,
    Blackwell) or an MI300 (``gfx942``). CPUs never do (torchao can only emulate fp8 there)."""
    if info.gpu_arch is not None:
        return info.gpu_arch.startswith("gfx942") or "MI300" in info.name.upper()
    return info.cuda_capability is not None and info.cuda_capability >= (8, 9)


def torchao_importable() -> bool:
    """Whether ``torchao`` is installed (looked up, not imported: importing it takes seconds)."""
    import importlib.util

    return importlib.util.find_spec("torchao") is not None


def _cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "CPU"


def probe(device: torch.device) -> HardwareInfo:
    """Describe ``device``'s mixed-precision abilities by asking the machine."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        arch = None
        if torch.version.hip is not None:
            arch = getattr(torch.cuda.get_device_properties(index), "gcnArchName", None)
        return HardwareInfo(
            device=device,
            name=torch.cuda.get_device_name(index),
            cuda_capability=(major, minor),
            cuda_bf16=major >= 8,
            gpu_arch=arch,
            torchao_available=torchao_importable(),
        )
    if device.type == "cpu":
        flags = read_cpu_flags()
        if flags:
            native = cpu_has_native_bf16(flags)
        else:  # no /proc/cpuinfo: ask oneDNN, which checks the same instructions
            native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        return HardwareInfo(
            device=device,
            name=_cpu_name(),
            cpu_native_bf16=native,
            torchao_available=torchao_importable(),
        )
    return HardwareInfo(device=device, name=device.type)
