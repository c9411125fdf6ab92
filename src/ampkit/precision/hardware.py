"""What the hardware can do for mixed precision, read without side effects.

The probes are small pure functions over plain data (CPU flag sets, compute capabilities, AMD
gfx architectures) so tests can ask "what would ampkit pick on an Ampere GPU / an MI250X / a
Mac / a CPU with AMX" without that hardware. Only :func:`probe` touches the machine.

Backends: NVIDIA CUDA and AMD ROCm both appear as device type ``cuda`` (torch.cuda is HIP on
ROCm builds); they are told apart by ``torch.version.hip`` and the device's ``gcnArchName``,
because ROCm's ``get_device_capability`` returns the gfx architecture (an MI250X, gfx90a,
reads as (9, 0), which as an NVIDIA compute capability would mean Hopper). Apple GPUs are
``mps``, Intel GPUs ``xpu``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

__all__ = [
    "CPU_BF16_FLAGS",
    "Backend",
    "HardwareInfo",
    "RocmArch",
    "fp8_capable",
    "rocm_arch",
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


Backend = Literal["cuda", "rocm", "mps", "xpu", "cpu", "other"]


@dataclass(frozen=True, kw_only=True)
class HardwareInfo:
    """What one device offers for mixed precision.

    Attributes:
        device: the device described.
        name: a human name (the GPU's or the CPU's model).
        cuda_capability: ``(major, minor)`` from ``torch.cuda.get_device_capability``: the
            NVIDIA compute capability; on ROCm the gfx architecture's numbers (not a compute
            capability: rules read :attr:`gpu_arch` there). None elsewhere.
        cuda_bf16: whether the CUDA/ROCm device runs bfloat16 (None elsewhere).
        cpu_native_bf16: whether the CPU has native bf16 instructions (None on GPUs).
        gpu_arch: the ROCm architecture (``gcnArchName``: ``gfx942:sramecc+:xnack-`` on an
            MI300X); set means the device is an AMD GPU under ROCm. None on NVIDIA and CPUs.
        torchao_available: whether ``torchao`` (fp8 training) is importable; None: not asked.
        mps_bf16: Apple MPS only: whether bf16 autocast runs (macOS 14+ and torch 2.6+).
        xpu_bf16: Intel XPU only: whether the device has bf16 (``has_bfloat16_conversions``).
        xpu_fp16: Intel XPU only: whether the device has fp16 (``has_fp16``).
    """

    device: torch.device
    name: str
    cuda_capability: tuple[int, int] | None = None
    cuda_bf16: bool | None = None
    cpu_native_bf16: bool | None = None
    gpu_arch: str | None = None
    torchao_available: bool | None = None
    mps_bf16: bool | None = None
    xpu_bf16: bool | None = None
    xpu_fp16: bool | None = None

    @property
    def backend(self) -> Backend:
        """``cuda`` (NVIDIA), ``rocm`` (AMD: device type cuda with a gfx architecture),
        ``mps``, ``xpu``, ``cpu``, or ``other``."""
        kind = self.device.type
        if kind == "cuda":
            return "rocm" if self.gpu_arch is not None else "cuda"
        if kind in ("mps", "xpu", "cpu"):
            return kind  # type: ignore[return-value]
        return "other"


@dataclass(frozen=True)
class RocmArch:
    """What ampkit knows about one AMD gfx architecture family.

    Attributes:
        family: the products, e.g. ``"MI300 (CDNA3)"``.
        bf16: bf16 matrix instructions (MFMA on CDNA, WMMA on RDNA3+).
        fp8: torchao's float8 training supports it (MI300 class and MI350 class).
        note: why, in a few words, for the reason a policy gives.
    """

    family: str
    bf16: bool
    fp8: bool
    note: str


#: gfx architecture (without feature suffixes) to what it offers. Sources: AMD's CDNA/RDNA ISA
#: guides (MFMA bf16 since CDNA1, full-rate bf16 since CDNA2, fp8 since CDNA3; WMMA fp16/bf16
#: since RDNA3) and torchao's ROCm checks (float8 on gfx940/941/942 and gfx950).
_ROCM_ARCHS: dict[str, RocmArch] = {
    "gfx908": RocmArch("MI100 (CDNA1)", True, False, "bf16 matrix cores at half the fp16 rate"),
    "gfx90a": RocmArch("MI200 (CDNA2)", True, False, "full-rate bf16 matrix cores, no fp8"),
    "gfx940": RocmArch("MI300 (CDNA3)", True, True, "bf16 and fp8 matrix cores"),
    "gfx941": RocmArch("MI300 (CDNA3)", True, True, "bf16 and fp8 matrix cores"),
    "gfx942": RocmArch("MI300 (CDNA3)", True, True, "bf16 and fp8 matrix cores"),
    "gfx950": RocmArch("MI350 (CDNA4)", True, True, "bf16 and fp8 matrix cores"),
}


def rocm_arch(gpu_arch: str) -> RocmArch | None:
    """What the gfx architecture ``gpu_arch`` offers; None for one ampkit has no rule for.

    ``gcnArchName`` carries feature suffixes (``gfx90a:sramecc+:xnack-``); they are ignored.
    RDNA3/3.5 (``gfx11xx``) and RDNA4 (``gfx12xx``) consumer GPUs have bf16 WMMA; torchao's
    float8 training does not cover them. Older architectures (gfx906 Vega 20, gfx10xx RDNA1/2)
    have fp16 packed math but no bf16 matrix instructions.
    """
    base = gpu_arch.split(":", 1)[0].strip().lower()
    if base in _ROCM_ARCHS:
        return _ROCM_ARCHS[base]
    if base.startswith("gfx11"):
        return RocmArch("RDNA3 (Radeon RX 7000 / Radeon PRO W7000)", True, False,
                        "bf16 WMMA, no fp8")  # fmt: skip
    if base.startswith("gfx12"):
        return RocmArch("RDNA4 (Radeon RX 9000)", True, False,
                        "bf16 WMMA; torchao's float8 training does not cover RDNA4")  # fmt: skip
    if base.startswith("gfx10") or base in ("gfx900", "gfx906"):
        return RocmArch("GCN5/RDNA1/RDNA2", False, False, "fp16 packed math, no bf16 matrix cores")
    return None


def fp8_capable(info: HardwareInfo) -> bool:
    """Whether the GPU has fp8 matrix units torchao trains with: NVIDIA compute capability
    8.9+ (Ada, Hopper, Blackwell), or on ROCm an MI300 (gfx940-942) or MI350 (gfx950) class
    GPU (read from the gfx architecture, never from ROCm's capability numbers). CPUs, Apple and
    Intel GPUs never do here (torchao can only emulate fp8 there)."""
    if info.gpu_arch is not None:
        arch = rocm_arch(info.gpu_arch)
        return arch is not None and arch.fp8
    if info.device.type != "cuda":
        return False
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


def _torch_at_least(major: int, minor: int) -> bool:
    numbers = torch.__version__.split("+", 1)[0].split(".")
    try:
        return (int(numbers[0]), int(numbers[1])) >= (major, minor)
    except (IndexError, ValueError):
        return True


def probe(device: torch.device) -> HardwareInfo:
    """Describe ``device``'s mixed-precision abilities by asking the machine.

    The caller checks that the device exists (:func:`ampkit.precision.policy.resolve_device`).
    """
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        arch = None
        if torch.version.hip is not None:  # ROCm: (major, minor) are gfx numbers
            arch = getattr(torch.cuda.get_device_properties(index), "gcnArchName", None)
            arch = arch or f"gfx{major}{minor}"  # very old ROCm builds lack gcnArchName
            known = rocm_arch(arch)
            bf16 = known.bf16 if known is not None else torch.cuda.is_bf16_supported()
        else:
            bf16 = major >= 8
        return HardwareInfo(
            device=device,
            name=torch.cuda.get_device_name(index),
            cuda_capability=(major, minor),
            cuda_bf16=bf16,
            gpu_arch=arch,
            torchao_available=torchao_importable(),
        )
    if device.type == "mps":
        import platform

        mps = torch.backends.mps
        if hasattr(mps, "is_macos_or_newer"):
            on_14 = bool(mps.is_macos_or_newer(14, 0))
        else:
            macos = platform.mac_ver()[0].split(".")[0]
            on_14 = macos.isdigit() and int(macos) >= 14
        return HardwareInfo(
            device=device,
            name=f"Apple GPU ({platform.machine() or 'arm64'}, macOS {platform.mac_ver()[0]})",
            mps_bf16=on_14 and _torch_at_least(2, 6),  # bf16 autocast: torch 2.6+
            torchao_available=torchao_importable(),
        )
    if device.type == "xpu":
        xpu = torch.xpu
        index = device.index if device.index is not None else xpu.current_device()
        props = xpu.get_device_properties(index)
        return HardwareInfo(
            device=device,
            name=str(getattr(props, "name", "Intel GPU")),
            xpu_bf16=bool(getattr(props, "has_bfloat16_conversions", False)),
            xpu_fp16=bool(getattr(props, "has_fp16", True)),
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
