"""The precision policy: which number format to train in on this hardware, and why.

:func:`resolve_precision` turns a user's spelling (``"auto"``, ``"bf16-mixed"``, ...) and a device
into a frozen :class:`Policy`. Nothing here changes global torch state; :func:`precision_session`
applies the policy's global settings (TF32) and restores them on exit.
"""

from __future__ import annotations

import contextlib
import difflib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import torch

from ampkit._stack import user_stacklevel
from ampkit.errors import (
    ConfigurationError,
    MissingDependencyError,
    PrecisionWarning,
    UnsupportedPrecisionError,
)
from ampkit.precision.hardware import HardwareInfo, fp8_capable, probe, torchao_importable

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

Precision = Literal["fp32", "fp16", "bf16", "bf16-true", "fp8"]

#: Every accepted spelling and the canonical precision it names (``"auto"`` is resolved apart).
PRECISION_ALIASES: dict[str, Precision] = {
    "fp32": "fp32",
    "32": "fp32",
    "32-true": "fp32",
    "float32": "fp32",
    "fp16": "fp16",
    "fp16-mixed": "fp16",
    "16-mixed": "fp16",
    "float16": "fp16",
    "bf16": "bf16",
    "bf16-mixed": "bf16",
    "bfloat16": "bf16",
    "bf16-true": "bf16-true",
    "fp8": "fp8",
    "fp8-tensorwise": "fp8",
    "fp8-rowwise": "fp8",
    "fp8-rowwise-gw-hp": "fp8",
}

#: The torchao float8 recipe (``Float8LinearConfig.from_recipe_name``) each fp8 spelling names.
FP8_RECIPES: dict[str, str] = {
    "fp8": "tensorwise",
    "fp8-tensorwise": "tensorwise",
    "fp8-rowwise": "rowwise",
    "fp8-rowwise-gw-hp": "rowwise_with_gw_hp",
}

#: The dtype autocast runs matmuls and convolutions in, per canonical precision.
_DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "bf16-true": torch.bfloat16,  # parameters, gradients and optimizer state too
    "fp8": torch.bfloat16,  # every op that is not an fp8 Linear runs under bf16 autocast
}

#: Precisions whose parameters are stored in a low-precision dtype (every other: fp32).
_PARAM_DTYPES: dict[str, torch.dtype] = {"bf16-true": torch.bfloat16}

#: Precisions whose narrow exponent needs dynamic loss scaling.
_SCALED: set[str] = {"fp16"}

#: Names added by :func:`register_precision` (the built-in ones cannot be removed).
_REGISTERED: set[str] = set()

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
        return _PARAM_DTYPES.get(self.precision, torch.float32)

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


def resolve_device(device: torch.device | str | None = None) -> torch.device:
    """``None`` means the current CUDA device when one is available, else the CPU.

    Raises:
        ConfigurationError: ``device`` is not a device name, names CUDA where this PyTorch
            build or machine has none (or not that many devices), or is ``meta`` (no data).
    """
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigurationError(
            f"device: {device!r} is not a device name. Use 'cpu', 'cuda' or 'cuda:N'."
        ) from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                f"this PyTorch build ({torch.__version__}) has no CUDA support"
                if torch.version.cuda is None
                else "no CUDA device is visible (check the driver and CUDA_VISIBLE_DEVICES)"
            )
            raise ConfigurationError(
                f"device: {device!r} was requested, but {why}. Use 'cpu', or run on a machine "
                "with a CUDA GPU and a CUDA build of PyTorch."
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ConfigurationError(
                f"device: {device!r} was requested, but only {count} CUDA device(s) are "
                f"visible. Use 'cuda:0' to 'cuda:{count - 1}'."
            )
    if dev.type == "meta":
        raise ConfigurationError(
            f"device: {device!r} tensors hold no data, so nothing can be trained or measured "
            "on them. Use 'cpu', 'cuda' or 'cuda:N'."
        )
    return dev


@dataclass(frozen=True)
class ParsedPrecision:
    """A precision as spelled, read: what :func:`parse_precision` returns.

    Attributes:
        precision: the canonical name (``"fp32"``, ``"fp16"``, ``"bf16"``, ``"bf16-true"``,
            ``"fp8"`` or a registered one), or ``"auto"`` (decided by the hardware).
        spelled: the spelling as given.
        fp8_recipe: fp8 only: torchao's recipe the spelling names (:data:`FP8_RECIPES`).
    """

    precision: str
    spelled: str
    fp8_recipe: str | None = None


def parse_precision(spelled: str) -> ParsedPrecision:
    """Read a precision's spelling (``"bf16-mixed"``, ``"fp8-rowwise"``, ``"auto"``, ...): the one
    parser every command, the engine and the Trainer use. Case and surrounding spaces are
    ignored.

    Raises:
        ConfigurationError: ``spelled`` is not a string or not a known name; the message lists
            the accepted names and the closest one.
    """
    key = spelled.strip().lower() if isinstance(spelled, str) else spelled
    if key == "auto":
        return ParsedPrecision("auto", str(spelled))
    if isinstance(key, str) and key in PRECISION_ALIASES:
        return ParsedPrecision(PRECISION_ALIASES[key], spelled, FP8_RECIPES.get(key))
    accepted = ["auto", *PRECISION_ALIASES]
    guess = difflib.get_close_matches(str(key), accepted, n=1)
    hint = f" Did you mean {guess[0]!r}?" if guess else ""
    raise ConfigurationError(
        f"precision: unknown precision {spelled!r}. Accepted: {', '.join(accepted)}.{hint}"
    )


def _canonical(precision: str) -> str:
    return parse_precision(precision).precision


def uses_loss_scaling(precision: str) -> bool:
    """Whether training in ``precision`` (a spelling or canonical name) scales the loss
    (fp16's narrow exponent needs it; ``"auto"`` is not a precision here).

    Raises:
        ConfigurationError: ``precision`` is unknown.
    """
    return parse_precision(precision).precision in _SCALED


def register_precision(
    name: str,
    *,
    compute_dtype: torch.dtype,
    param_dtype: torch.dtype = torch.float32,
    uses_scaler: bool = False,
    aliases: tuple[str, ...] = (),
) -> None:
    """Make ``name`` (and its ``aliases``) a precision :func:`resolve_precision` accepts.

    :func:`ampkit.precision.modes.register_mode` calls it for a new precision mode; the
    hardware rules of an explicit choice apply to it.

    Args:
        name: the canonical name (lower case, not yet taken).
        compute_dtype: the dtype autocast runs matmuls and convolutions in.
        param_dtype: the dtype the parameters are stored in.
        uses_scaler: whether the loss is scaled (dynamic loss scaling, as fp16).
        aliases: other spellings of it.

    Raises:
        ConfigurationError: a name or alias is taken (or ``"auto"``), or not lower case.
    """
    for spelled in (name, *aliases):
        if not isinstance(spelled, str) or spelled != spelled.strip().lower() or not spelled:
            raise ConfigurationError(
                f"register_precision: {spelled!r} is not a precision name; use a lower-case "
                "string without surrounding spaces."
            )
        if spelled == "auto" or spelled in PRECISION_ALIASES:
            raise ConfigurationError(
                f"register_precision: {spelled!r} is taken (it names "
                f"{PRECISION_ALIASES.get(spelled, 'auto')!r}). Pick another name."
            )
    for spelled in (name, *aliases):
        PRECISION_ALIASES[spelled] = name  # type: ignore[assignment]
    _DTYPES[name] = compute_dtype
    if param_dtype != torch.float32:
        _PARAM_DTYPES[name] = param_dtype
    if uses_scaler:
        _SCALED.add(name)
    _REGISTERED.add(name)


def unregister_precision(name: str) -> None:
    """Remove a precision added by :func:`register_precision` (and its aliases).

    Raises:
        ConfigurationError: ``name`` was not registered (the built-in names stay).
    """
    if name not in _REGISTERED:
        raise ConfigurationError(
            f"unregister_precision: {name!r} was not added by register_precision; the built-in "
            "precisions cannot be removed."
        )
    for spelled in [k for k, v in PRECISION_ALIASES.items() if v == name]:
        del PRECISION_ALIASES[spelled]
    _DTYPES.pop(name, None)
    _PARAM_DTYPES.pop(name, None)
    _SCALED.discard(name)
    _REGISTERED.discard(name)


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
            "precision: 'auto' depends on the hardware; resolve it with resolve_precision first."
        )
    name = parsed.precision
    return Policy(
        precision=name,
        device=torch.device(device),
        compute_dtype=_DTYPES[name],
        uses_scaler=name in _SCALED,
        reason=f"{name} autocast for analysis (the hardware was not asked whether it runs it).",
        requested=str(precision),
        fp8_recipe=parsed.fp8_recipe,
    )


def _auto(hw: HardwareInfo) -> tuple[Precision, str]:
    if hw.cuda_capability is not None:
        major, minor = hw.cuda_capability
        cc = f"{hw.name} (compute capability {major}.{minor})"
        if major >= 8:
            return "bf16", f"{cc} has bf16 tensor cores, so bf16 autocast needs no loss scaling."
        if major == 7:
            return "fp16", (
                f"{cc} has fp16 tensor cores but no bf16, so fp16 autocast with dynamic "
                "loss scaling."
            )
        return "fp32", f"{cc} has no tensor cores, so low precision would not be faster: fp32."
    if hw.device.type == "cpu":
        if hw.cpu_native_bf16:
            return "bf16", f"{hw.name} has native bf16 instructions (AVX512-BF16/AMX): bf16."
        return "fp32", (
            f"{hw.name} has no native bf16 (no AVX512-BF16 or AMX), so low precision would be "
            "emulated and slower: fp32."
        )
    return "fp32", f"no mixed-precision rules are known for device type {hw.device.type!r}: fp32."


def _fp8(hw: HardwareInfo, spelled: str, emulate: bool) -> str:
    """Whether fp8 runs on ``hw``: refuse with the reason, or say why it was accepted."""
    where = hw.name
    if hw.cuda_capability is not None:
        where = f"{hw.name} (compute capability {hw.cuda_capability[0]}.{hw.cuda_capability[1]})"
    if emulate:
        reason = f"fp8 was requested with emulate=True: torchao emulates the fp8 matmuls on {where} (numerics only, no speed-up)."
    elif hw.device.type == "cuda" and fp8_capable(hw):
        reason = f"fp8 was requested explicitly; {where} has fp8 tensor cores."
    elif hw.device.type == "cuda":
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} needs fp8 tensor cores, but {where} has none; fp8 needs "
            "compute capability 8.9 or newer (Ada, Hopper, Blackwell) or an MI300. "
            "Use bf16 on this GPU."
        )
    elif hw.device.type == "cpu":
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} on the CPU ({where}): CPUs have no fp8 matmuls. fp8 "
            "trains on CUDA compute capability 8.9+ or MI300 GPUs; on a CPU only torchao's "
            "emulation runs (numerics, no speed-up): pass emulate=True for tests, or use bf16 "
            "or fp32."
        )
    else:
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} on device type {hw.device.type!r}: fp8 training runs on "
            "CUDA (compute capability 8.9+) or ROCm MI300 only. Use bf16 or fp32."
        )
    available = hw.torchao_available
    if available is None:
        available = torchao_importable()
    if not available:
        raise MissingDependencyError(
            f"precision: {spelled!r} needs torchao's float8 training, but torchao is not "
            f"installed. Install it: {_FP8_INSTALL}."
        )
    return reason


def _explicit(precision: str, hw: HardwareInfo, spelled: str) -> str:
    if precision in ("bf16", "bf16-true") and hw.cuda_bf16 is False:
        major, minor = hw.cuda_capability or (0, 0)
        raise UnsupportedPrecisionError(
            f"precision: {spelled!r} needs bf16 support, but {hw.name} (compute capability "
            f"{major}.{minor}) has none; bf16 needs compute capability 8.0 or newer. "
            "Use fp16 (with loss scaling) or fp32."
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
    return f"{precision} was requested explicitly."


def resolve_precision(
    precision: str = "auto",
    device: torch.device | str | None = None,
    *,
    tf32: bool | None = None,
    hardware: HardwareInfo | None = None,
    emulate: bool = False,
) -> Policy:
    """Decide the training precision for ``device``.

    ``"auto"`` picks from the hardware: bf16 on CUDA compute capability >= 8.0, fp16 with loss
    scaling on 7.x, fp32 on older GPUs; bf16 on CPUs with native bf16, else fp32. It never picks
    fp16 on a CPU, and never fp8 or bf16-true (they change more than the autocast dtype).
    Explicit choices are honoured unless the hardware cannot run them.

    Args:
        precision: ``auto``, ``fp32``, ``fp16``, ``bf16``, ``bf16-true``, ``fp8`` or an alias in
            :data:`PRECISION_ALIASES` (``fp8-rowwise`` etc. pick the recipe, :data:`FP8_RECIPES`).
        device: the training device; ``None`` picks CUDA when available, else CPU.
        tf32: let fp32 matmuls use TF32; ``None`` enables it where the GPU has TF32 (Ampere+).
        hardware: describe the hardware instead of probing it (tests, planning for another box).
        emulate: fp8 only: let torchao emulate fp8 where the hardware has none (CPU tests).

    Raises:
        ConfigurationError: ``precision`` is not a known name (the message lists them), or
            ``emulate`` with a precision other than fp8.
        UnsupportedPrecisionError: bf16/bf16-true on a CUDA device without bf16; fp8 on a GPU
            below compute capability 8.9 (not MI300), or on a CPU without ``emulate=True``.
        MissingDependencyError: fp8 without torchao installed.

    Warns:
        PrecisionWarning: fp16 requested on a CPU (honoured, but emulated and slow).
    """
    parsed = parse_precision(precision)
    wanted = parsed.precision
    dev = resolve_device(device) if hardware is None else hardware.device
    hw = hardware if hardware is not None else probe(dev)
    if emulate and wanted != "fp8":
        raise ConfigurationError(
            f"emulate: emulate=True applies to fp8 only, but the precision is {precision!r}. "
            "Drop emulate=True, or ask for precision='fp8'."
        )
    chosen: str
    if wanted == "auto":
        chosen, reason = _auto(hw)
    elif wanted == "fp8":
        chosen, reason = wanted, _fp8(hw, precision, emulate)
    else:
        chosen, reason = wanted, _explicit(wanted, hw, precision)
    has_tf32 = hw.cuda_capability is not None and hw.cuda_capability[0] >= 8
    if tf32 and not has_tf32:
        raise UnsupportedPrecisionError(
            f"tf32: TF32 was requested, but {hw.name} has no TF32 tensor cores "
            "(CUDA compute capability 8.0+ only). Pass tf32=None or False."
        )
    return Policy(
        precision=chosen,
        device=dev,
        compute_dtype=_DTYPES[chosen],
        uses_scaler=chosen in _SCALED,
        reason=reason,
        tf32=has_tf32 if tf32 is None else tf32,
        requested=str(precision),
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
