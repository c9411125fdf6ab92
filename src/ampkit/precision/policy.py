"""The precision policy: which number format to train in on this hardware, and why.

:func:`resolve_precision` turns a user's spelling (``"auto"``, ``"bf16-mixed"``, ...) and a device
into a frozen :class:`Policy`. Nothing here changes global torch state; :func:`precision_session`
applies the policy's global settings (TF32) and restores them on exit.

The names a spelling may take, and each precision's dtypes and loss scaling, are the modes'
own (declared on their classes, read through :mod:`ampkit.precision.spelling`, which holds the
parser); ``parse_precision``, ``ParsedPrecision``, ``PRECISION_ALIASES`` and ``FP8_RECIPES``
are re-exported here as before.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ampkit._stack import user_stacklevel
from ampkit.errors import (
    ConfigurationError,
    MissingDependencyError,
    PrecisionWarning,
    UnsupportedPrecisionError,
)
from ampkit.precision import devices
from ampkit.precision.hardware import (
    HardwareInfo,
    fp8_capable,
    probe,
    rocm_arch,
    torchao_importable,
)
from ampkit.precision.spelling import (
    FP8_RECIPES,
    PRECISION_ALIASES,
    ParsedPrecision,
    PrecisionFacts,
    add_precision,
    parse_precision,
    precision_facts,
    registered_precisions,
    remove_precision,
)

__all__ = [
    "FP8_RECIPES",
    "PRECISION_ALIASES",
    "ParsedPrecision",
    "Policy",
    "Precision",
    "analysis_policy",
    "parse_precision",
    "precision_session",
    "register_precision",
    "resolve_device",
    "resolve_precision",
    "unregister_precision",
    "uses_loss_scaling",
]

#: A canonical precision name: one a registered mode declares (``"fp32"``, ``"fp16"``, ``"bf16"``,
#: ``"bf16-true"``, ``"fp8"``, or one added with :func:`register_precision`).
Precision = str


def _torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a dtype name a mode declares (``"bfloat16"``)."""
    dtype = getattr(torch, name)
    if not isinstance(dtype, torch.dtype):
        raise ConfigurationError(f"precision: {name!r} is not a torch dtype.")
    return dtype


def _dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def _compute_dtype(name: str) -> torch.dtype:
    return _torch_dtype(precision_facts(name).compute_dtype)


def _scaled(name: str) -> bool:
    return precision_facts(name).uses_scaler


_FP8_INSTALL = "pip install 'ampkit[fp8]' (torchao 0.18 pairs with torch 2.13)"

#: Measured costs: docs/benchmarks.md has the tables and the commands that produced them.
_CPU_FP16_COST = (
    "fp16 autocast on a CPU runs emulated kernels: on a CPU with AVX512-BF16 it measured about "
    "60x slower per step than bf16 (1024-wide MLP), and on CPUs without native bf16 both are "
    "slower than fp32; use bf16 where the CPU has AVX512-BF16/AMX, else fp32"
)


@dataclass(frozen=True, kw_only=True)
class Policy:
    """A resolved precision decision. Build one with :func:`resolve_precision`.

    Attributes:
        precision: canonical name: ``"fp32"``, ``"fp16"``, ``"bf16"`` (mixed: fp32 weights),
            ``"bf16-true"`` (bf16 weights, gradients and optimizer state, compensated updates)
            or ``"fp8"`` (torchao float8 Linears, bf16 autocast elsewhere); or a name added
            with :func:`register_precision`.
        device: the device the policy is for.
        compute_dtype: the dtype autocast runs matmuls and convolutions in.
        uses_scaler: True only for fp16, whose narrow exponent needs dynamic loss scaling.
        reason: one sentence saying why this precision on this hardware.
        tf32: whether fp32 matmuls and convolutions may use TF32 tensor cores (CUDA Ampere+).
            Takes effect only inside :func:`precision_session`.
        requested: the spelling the user gave (``"auto"``, ``"bf16-mixed"``, ...).
        fp8_recipe: fp8 only: torchao's recipe, ``tensorwise``, ``rowwise`` or
            ``rowwise_with_gw_hp`` (from the spelling, see :data:`FP8_RECIPES`).
        emulate: fp8 only: torchao emulates the fp8 matmuls (CPU tests; no speed-up).
    """

    precision: str
    device: torch.device
    compute_dtype: torch.dtype
    uses_scaler: bool
    reason: str
    tf32: bool = False
    requested: str = "auto"
    fp8_recipe: str | None = None
    emulate: bool = False

    @property
    def param_dtype(self) -> torch.dtype:
        """The dtype parameters are stored in: bf16 for ``bf16-true``, else fp32."""
        if self.precision not in registered_precisions():
            return torch.float32  # a Policy built by hand for a name no mode declares
        return _torch_dtype(precision_facts(self.precision).param_dtype)

    @property
    def autocast_enabled(self) -> bool:
        """Whether autocast runs anything in low precision under this policy."""
        return self.compute_dtype != torch.float32

    def autocast(self) -> torch.autocast:
        """An autocast region for this policy (disabled, i.e. explicit fp32, for fp32)."""
        return torch.autocast(
            device_type=self.device.type,
            dtype=self.compute_dtype if self.autocast_enabled else None,
            enabled=self.autocast_enabled,
        )

    def describe(self) -> str:
        """One line for run summaries: ``bf16 on cpu (TF32 off): <reason>``."""
        tf32 = ", TF32 on" if self.tf32 else ""
        return f"{self.precision} on {self.device}{tf32}: {self.reason}"


_DEVICE_NAMES = "'cpu', 'cuda' or 'cuda:N' (NVIDIA, or AMD under ROCm), 'mps' or 'xpu'/'xpu:N'"


def _usable_here() -> str:
    """The device names this machine can run, for "what to use" in a message."""
    names = ["'cpu'"]
    for kind in devices.ACCELERATORS:
        if devices.is_available(kind):
            names.append(f"'{kind}'")
    return ", ".join(names)


def resolve_device(device: torch.device | str | None = None) -> torch.device:
    """``None`` means the current CUDA (or ROCm) device when one is available, else the
    current Intel XPU, else Apple MPS, else the CPU (:func:`~ampkit.precision.devices.default_device`).

    Raises:
        ConfigurationError: ``device`` is not a device name, names a backend (CUDA/ROCm, XPU,
            MPS) this PyTorch build or machine lacks (or more devices than are visible), or is
            ``meta`` (no data). The message says what is usable here.
    """
    if device is None:
        return devices.default_device()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigurationError(
            f"device: {device!r} is not a device name. Use {_DEVICE_NAMES}.", argument="device"
        ) from exc
    if dev.type in devices.ACCELERATORS:
        if not devices.is_available(dev.type):
            raise ConfigurationError(
                f"device: {device!r} was requested, but {devices.unavailable_reason(dev.type)}. "
                f"Use a device this machine has: {_usable_here()}.",
                argument="device",
            )
        count = devices.device_count(dev.type)
        if dev.index is not None and dev.index >= count:
            last = (
                f"'{dev.type}:0'" if count == 1 else f"'{dev.type}:0' to '{dev.type}:{count - 1}'"
            )
            raise ConfigurationError(
                f"device: {device!r} was requested, but only {count} {dev.type} device(s) are "
                f"visible. Use {last}.",
                argument="device",
            )
    if dev.type == "meta":
        raise ConfigurationError(
            f"device: {device!r} tensors hold no data, so nothing can be trained or measured "
            f"on them. Use {_DEVICE_NAMES}.",
            argument="device",
        )
    return dev


def _canonical(precision: str) -> str:
    return parse_precision(precision).precision


def uses_loss_scaling(precision: str) -> bool:
    """Whether training in ``precision`` (a spelling or canonical name) scales the loss
    (fp16's narrow exponent needs it; ``"auto"`` is not a precision here).

    Raises:
        ConfigurationError: ``precision`` is unknown.
    """
    return _scaled(parse_precision(precision).precision)


def register_precision(
    name: str,
    *,
    compute_dtype: torch.dtype,
    param_dtype: torch.dtype = torch.float32,
    uses_scaler: bool = False,
    aliases: tuple[str, ...] = (),
) -> None:
    """Make ``name`` (and its ``aliases``) a precision :func:`resolve_precision` accepts.

    A precision mode declares these facts on its class
    (:attr:`~ampkit.precision.modes.PrecisionMode.precision_facts`) and
    :func:`ampkit.precision.modes.register_mode` adds them; this is the same for a name given
    by its facts alone. The hardware rules of an explicit choice apply to it.

    Args:
        name: the canonical name (lower case, not yet taken).
        compute_dtype: the dtype autocast runs matmuls and convolutions in.
        param_dtype: the dtype the parameters are stored in.
        uses_scaler: whether the loss is scaled (dynamic loss scaling, as fp16).
        aliases: other spellings of it.

    Raises:
        ConfigurationError: a name or alias is taken (or ``"auto"``), not lower case, or a
            dtype other than fp32, fp16 or bf16.
    """
    add_precision(
        PrecisionFacts(
            name,
            tuple(aliases),
            compute_dtype=_dtype_name(compute_dtype),
            param_dtype=_dtype_name(param_dtype),
            uses_scaler=bool(uses_scaler),
        )
    )


def unregister_precision(name: str) -> None:
    """Remove a precision added by :func:`register_precision` (and its aliases).

    Raises:
        ConfigurationError: ``name`` was not registered (the built-in names stay).
    """
    remove_precision(name)


def analysis_policy(precision: str, device: torch.device | str) -> Policy:
    """A :class:`Policy` for measuring numerics, not for training: ``precision``'s autocast on
    ``device`` without asking whether the hardware runs it fast (the doctor plans for other
    machines too). Its ``reason`` says so.

    Raises:
        ConfigurationError: ``precision`` is unknown or ``"auto"``.
    """
    parsed = parse_precision(precision)
    if parsed.precision == "auto":
        raise ConfigurationError(
            "precision: 'auto' depends on the hardware; resolve it with resolve_precision first.",
            argument="precision",
        )
    name = parsed.precision
    return Policy(
        precision=name,
        device=torch.device(device),
        compute_dtype=_compute_dtype(name),
        uses_scaler=_scaled(name),
        reason=f"{name} autocast for analysis (the hardware was not asked whether it runs it).",
        requested=str(precision),
        fp8_recipe=parsed.fp8_recipe,
    )


def _where(hw: HardwareInfo) -> str:
    """The device as a message names it: its name and what identifies its generation."""
    backend = hw.backend
    if backend == "rocm" and hw.gpu_arch is not None:
        arch = rocm_arch(hw.gpu_arch)
        base = hw.gpu_arch.split(":", 1)[0]
        return f"{hw.name} (AMD {base}, {arch.family})" if arch else f"{hw.name} (AMD {base})"
    if backend == "cuda" and hw.cuda_capability is not None:
        major, minor = hw.cuda_capability
        return f"{hw.name} (compute capability {major}.{minor})"
    if backend == "mps":
        return f"{hw.name} (Apple MPS)"
    if backend == "xpu":
        return f"{hw.name} (Intel XPU)"
    return hw.name


def _rocm_bf16(hw: HardwareInfo) -> bool | None:
    """bf16 on an AMD GPU: from the gfx architecture, else what torch reported."""
    arch = rocm_arch(hw.gpu_arch) if hw.gpu_arch is not None else None
    return arch.bf16 if arch is not None else hw.cuda_bf16


def _auto_rocm(hw: HardwareInfo) -> tuple[Precision, str]:
    where = _where(hw)
    arch = rocm_arch(hw.gpu_arch or "")
    if arch is not None and arch.bf16:
        extra = (
            " (fp16 runs twice as fast there but needs loss scaling: ask for fp16 explicitly)"
            if hw.gpu_arch is not None and hw.gpu_arch.startswith("gfx908")
            else ""
        )
        return "bf16", f"{where} has {arch.note}, so bf16 autocast needs no loss scaling{extra}."
    if arch is not None:
        return "fp16", (f"{where} has {arch.note}, so fp16 autocast with dynamic loss scaling.")
    if hw.cuda_bf16:
        return "bf16", (
            f"{where}: ampkit has no rule for this architecture, but torch reports bf16 "
            "support, so bf16 autocast (no loss scaling)."
        )
    return "fp32", (
        f"{where}: ampkit has no rule for this architecture and torch reports no bf16: fp32."
    )


def _auto(hw: HardwareInfo) -> tuple[Precision, str]:
    backend = hw.backend
    if backend == "rocm":
        return _auto_rocm(hw)
    if backend == "cuda" and hw.cuda_capability is not None:
        major, _ = hw.cuda_capability
        cc = _where(hw)
        if major >= 8:
            return "bf16", f"{cc} has bf16 tensor cores, so bf16 autocast needs no loss scaling."
        if major == 7:
            return "fp16", (
                f"{cc} has fp16 tensor cores but no bf16, so fp16 autocast with dynamic "
                "loss scaling."
            )
        return "fp32", f"{cc} has no tensor cores, so low precision would not be faster: fp32."
    if backend == "mps":
        bf16 = (
            "bf16 is accepted when asked for"
            if hw.mps_bf16 is not False
            else "bf16 would need macOS 14+ and torch 2.6+"
        )
        return "fp16", (
            f"{_where(hw)}: every Apple GPU computes fp16 natively and torch's MPS autocast "
            f"runs it, so fp16 autocast with dynamic loss scaling (fp16's narrow exponent needs "
            f"it on any device; TF32 does not apply); {bf16}."
        )
    if backend == "xpu":
        if hw.xpu_bf16:
            return "bf16", f"{_where(hw)} supports bf16, so bf16 autocast needs no loss scaling."
        if hw.xpu_fp16 is not False:
            return "fp16", (
                f"{_where(hw)} has fp16 but no bf16, so fp16 autocast with dynamic loss scaling."
            )
        return "fp32", f"{_where(hw)} has neither bf16 nor fp16: fp32."
    if hw.device.type == "cpu":
        if hw.cpu_native_bf16:
            return "bf16", f"{hw.name} has native bf16 instructions (AVX512-BF16/AMX): bf16."
        return "fp32", (
            f"{hw.name} has no native bf16 (no AVX512-BF16 or AMX), so low precision would be "
            "emulated and slower: fp32."
        )
    return "fp32", f"no mixed-precision rules are known for device type {hw.device.type!r}: fp32."


_FP8_WHERE = (
    "fp8 trains on NVIDIA compute capability 8.9+ (Ada, Hopper, Blackwell) and AMD MI300 "
    "(gfx940-942) / MI350 (gfx950) GPUs"
)


def _fp8(hw: HardwareInfo, spelled: str, emulate: bool) -> str:
    """Whether fp8 runs on ``hw``: refuse with the reason, or say why it was accepted."""
    where = _where(hw)
    backend = hw.backend
    if emulate:
        reason = f"fp8 was requested with emulate=True: torchao emulates the fp8 matmuls on {where} (numerics only, no speed-up)."
    elif backend in ("cuda", "rocm") and fp8_capable(hw):
        kind = "tensor cores" if backend == "cuda" else "matrix cores"
        reason = f"fp8 was requested explicitly; {where} has fp8 {kind}."
    elif backend == "cuda":
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} needs fp8 tensor cores, but {where} has none; fp8 needs "
            "compute capability 8.9 or newer (Ada, Hopper, Blackwell) or an MI300. "
            "Use bf16 on this GPU.",
            argument="precision",
        )
    elif backend == "rocm":
        fallback = _auto(hw)[0]
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} needs fp8 matrix cores that torchao trains with, but "
            f"{where} has none; on AMD GPUs torchao's fp8 training runs on MI300 (gfx940-942) "
            f"and MI350 (gfx950) only. Use {fallback} on this GPU (what 'auto' picks).",
            argument="precision",
        )
    elif hw.device.type == "cpu":
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} on the CPU ({where}): CPUs have no fp8 matmuls. fp8 "
            "trains on CUDA compute capability 8.9+ or MI300 GPUs; on a CPU only torchao's "
            "emulation runs (numerics, no speed-up): pass emulate=True for tests, or use bf16 "
            "or fp32.",
            argument="precision",
        )
    elif backend in ("mps", "xpu"):
        fallback = _auto(hw)[0]
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} on {where}: torchao's fp8 training has no kernels for "
            f"{'Apple' if backend == 'mps' else 'Intel'} GPUs; {_FP8_WHERE}. Use {fallback} "
            "here (what 'auto' picks), or emulate=True for numerics-only tests.",
            argument="precision",
        )
    else:
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} on device type {hw.device.type!r}: fp8 training runs on "
            "CUDA (compute capability 8.9+) or ROCm MI300 only. Use bf16 or fp32.",
            argument="precision",
        )
    available = hw.torchao_available
    if available is None:
        available = torchao_importable()
    if not available:
        raise MissingDependencyError(
            f"precision: {spelled!r} needs torchao's float8 training, but torchao is not "
            f"installed. Install it: {_FP8_INSTALL}.",
            argument="precision",
        )
    return reason


def _explicit(precision: str, hw: HardwareInfo, spelled: str) -> str:
    backend = hw.backend
    wants_bf16 = precision in ("bf16", "bf16-true")
    if wants_bf16 and backend == "cuda" and hw.cuda_bf16 is False:
        major, minor = hw.cuda_capability or (0, 0)
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} needs bf16 support, but {hw.name} (compute capability "
            f"{major}.{minor}) has none; bf16 needs compute capability 8.0 or newer. "
            "Use fp16 (with loss scaling) or fp32.",
            argument="precision",
        )
    if wants_bf16 and backend == "rocm" and _rocm_bf16(hw) is False:
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} needs bf16 matrix instructions, but {_where(hw)} has "
            "none; on AMD GPUs bf16 runs on MI100 (gfx908) and newer CDNA GPUs and on RDNA3+ "
            "(gfx11xx, gfx12xx). Use fp16 (with loss scaling) or fp32.",
            argument="precision",
        )
    if wants_bf16 and backend == "mps" and hw.mps_bf16 is False:
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} on {_where(hw)}: bf16 on MPS needs macOS 14 or newer and "
            f"torch 2.6 or newer (this is torch {torch.__version__}). Upgrade macOS/torch, or "
            "use fp16 (with loss scaling) or fp32.",
            argument="precision",
        )
    if wants_bf16 and backend == "xpu" and hw.xpu_bf16 is False:
        fp16 = "fp16 (with loss scaling) or fp32" if hw.xpu_fp16 is not False else "fp32"
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} needs bf16 support, but {_where(hw)} has none "
            f"(has_bfloat16_conversions is False). Use {fp16}.",
            argument="precision",
        )
    if precision == "fp16" and backend == "xpu" and hw.xpu_fp16 is False:
        other = "bf16 or fp32" if hw.xpu_bf16 else "fp32"
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} needs fp16 support, but {_where(hw)} has none "
            f"(has_fp16 is False). Use {other}.",
            argument="precision",
        )
    if precision == "fp16" and hw.device.type == "cpu":
        warnings.warn(
            f"precision {spelled!r} on the CPU: {_CPU_FP16_COST}.",
            PrecisionWarning,
            stacklevel=user_stacklevel(),
        )
        return "fp16 was requested explicitly; on a CPU it is slow (emulated)."
    if (
        precision in ("bf16", "bf16-true")
        and hw.device.type == "cpu"
        and hw.cpu_native_bf16 is False
    ):
        return (
            f"{precision} was requested explicitly; {hw.name} has no native bf16, so it may be "
            "slower than fp32."
        )
    if backend in ("rocm", "mps", "xpu"):
        scaled = " with dynamic loss scaling" if precision == "fp16" else ""
        return f"{precision} was requested explicitly{scaled}; {_where(hw)} runs it."
    return f"{precision} was requested explicitly."


def _has_tf32(hw: HardwareInfo) -> bool:
    """TF32 tensor cores: NVIDIA compute capability 8.0+ only (ROCm's capability numbers are
    gfx numbers; MPS, XPU and CPUs have no TF32 switch in torch)."""
    return hw.backend == "cuda" and hw.cuda_capability is not None and hw.cuda_capability[0] >= 8


def resolve_precision(
    precision: str | ParsedPrecision = "auto",
    device: torch.device | str | None = None,
    *,
    tf32: bool | None = None,
    hardware: HardwareInfo | None = None,
    emulate: bool = False,
) -> Policy:
    """Decide the training precision for ``device``.

    ``"auto"`` picks from the hardware: bf16 on CUDA compute capability >= 8.0, fp16 with loss
    scaling on 7.x, fp32 on older GPUs; on AMD GPUs (ROCm) by gfx architecture, bf16 from MI100
    and RDNA3 on; fp16 with loss scaling on Apple GPUs (MPS); bf16, else fp16, on Intel GPUs
    (XPU); bf16 on CPUs with native bf16, else fp32 (docs/engine.md has the tables). It never picks
    fp16 on a CPU, and never fp8 or bf16-true (they change more than the autocast dtype).
    Explicit choices are honoured unless the hardware cannot run them.

    Args:
        precision: ``auto``, ``fp32``, ``fp16``, ``bf16``, ``bf16-true``, ``fp8`` or an alias in
            :data:`PRECISION_ALIASES` (``fp8-rowwise`` etc. pick the recipe, :data:`FP8_RECIPES`);
            or a :class:`ParsedPrecision` already read by :func:`parse_precision` (a job that
            parsed its setting once hands that down).
        device: the training device; ``None`` picks CUDA when available, else CPU.
        tf32: let fp32 matmuls use TF32; ``None`` enables it where the GPU has TF32 (Ampere+).
        hardware: describe the hardware instead of probing it (tests, planning for another box).
        emulate: fp8 only: let torchao emulate fp8 where the hardware has none (CPU tests).

    Raises:
        ConfigurationError: ``precision`` is not a known name (the message lists them), or
            ``emulate`` with a precision other than fp8.
        UnsupportedPrecisionError: bf16/bf16-true (or fp16) on a device without it; fp8 on a
            GPU below compute capability 8.9, an AMD GPU other than MI300/MI350, an Apple or
            Intel GPU, or a CPU, without ``emulate=True``.
        MissingDependencyError: fp8 without torchao installed.

    Warns:
        PrecisionWarning: fp16 requested on a CPU (honoured, but emulated and slow).
    """
    parsed = precision if isinstance(precision, ParsedPrecision) else parse_precision(precision)
    spelled = parsed.spelled  # the user's spelling, for the messages
    wanted = parsed.precision
    dev = resolve_device(device) if hardware is None else hardware.device
    hw = hardware if hardware is not None else probe(dev)
    if emulate and wanted != "fp8":
        raise ConfigurationError(
            f"emulate: emulate=True applies to fp8 only, but the precision is {spelled!r}. "
            "Drop emulate=True, or ask for precision='fp8'."
        )
    chosen: str
    if wanted == "auto":
        chosen, reason = _auto(hw)
    elif wanted == "fp8":
        chosen, reason = wanted, _fp8(hw, spelled, emulate)
    else:
        chosen, reason = wanted, _explicit(wanted, hw, spelled)
    has_tf32 = _has_tf32(hw)
    if tf32 and not has_tf32:
        raise UnsupportedPrecisionError(
            f"tf32: TF32 was requested, but {hw.name} has no TF32 tensor cores "
            "(CUDA compute capability 8.0+ only). Pass tf32=None or False."
        )
    return Policy(
        precision=chosen,
        device=dev,
        compute_dtype=_compute_dtype(chosen),
        uses_scaler=_scaled(chosen),
        reason=reason,
        tf32=has_tf32 if tf32 is None else tf32,
        requested=str(spelled),
        fp8_recipe=parsed.fp8_recipe,
        emulate=emulate,
    )


@contextlib.contextmanager
def precision_session(policy: Policy) -> Iterator[Policy]:
    """Apply the policy's global torch settings for the duration of a ``with`` block.

    Today that is TF32: ``torch.backends.cuda.matmul`` precision and cuDNN's TF32 switch are
    set from ``policy.tf32`` and restored to their previous values on exit, error or not.
    """
    saved_matmul = torch.get_float32_matmul_precision()
    saved_cudnn = torch.backends.cudnn.allow_tf32
    try:
        if policy.device.type == "cuda":
            torch.set_float32_matmul_precision("high" if policy.tf32 else "highest")
            torch.backends.cudnn.allow_tf32 = policy.tf32
        yield policy
    finally:
        torch.set_float32_matmul_precision(saved_matmul)
        torch.backends.cudnn.allow_tf32 = saved_cudnn
