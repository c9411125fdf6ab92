"""The one place that knows device types: CUDA (NVIDIA, and AMD under ROCm), Apple MPS, Intel
XPU and the CPU.

Everything that differs per backend and is not a precision rule lives here: whether a backend
is present and how many devices it has, synchronising, peak memory, which random-number
generators a run draws from, the autocast device type, the distributed backend, and the data
loader defaults. Callers pass a ``torch.device`` and never branch on ``device.type``
themselves, so no CUDA-only call runs for an ``mps`` or ``xpu`` device.

ROCm builds of PyTorch expose AMD GPUs as device type ``cuda`` (``torch.cuda`` is HIP there,
and NCCL is RCCL), so ROCm takes the CUDA branches here; :func:`is_rocm` tells them apart.
Nothing here runs at import.
"""

from __future__ import annotations

import contextlib
import resource
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch

__all__ = [
    "ACCELERATORS",
    "autocast_device_type",
    "collective_device",
    "ddp_device_ids",
    "default_device",
    "device_count",
    "device_rng_states",
    "distributed_backend",
    "fork_rng",
    "fused_unscale_supported",
    "has_peak_memory_counter",
    "is_accelerator",
    "is_available",
    "is_rocm",
    "loader_defaults",
    "memory_allocated",
    "non_blocking_copy",
    "peak_memory",
    "reset_peak_memory",
    "set_current_device",
    "set_device_rng_states",
    "synchronize",
    "unavailable_reason",
]

#: The accelerator device types ampkit has rules for, in the order ``device=None`` tries them.
ACCELERATORS: tuple[str, ...] = ("cuda", "xpu", "mps")


def _module(device_type: str) -> ModuleType | None:
    """``torch.cuda`` / ``torch.xpu`` / ``torch.mps`` where this torch has it."""
    if device_type not in ACCELERATORS:
        return None
    return getattr(torch, device_type, None)


def _require(device_type: str) -> ModuleType:
    """The backend module of a device type already found available."""
    module = _module(device_type)
    if module is None:
        raise RuntimeError(f"torch.{device_type} is missing from this PyTorch build")
    return module


def is_rocm() -> bool:
    """Whether this PyTorch is a ROCm (HIP) build: its ``cuda`` devices are AMD GPUs."""
    return getattr(torch.version, "hip", None) is not None


def is_accelerator(device: torch.device) -> bool:
    """Whether ``device`` is a GPU ampkit has rules for (cuda incl. ROCm, xpu, mps)."""
    return device.type in ACCELERATORS


def is_available(device_type: str) -> bool:
    """Whether this PyTorch build and machine can run ``device_type`` (``cpu`` always can)."""
    if device_type == "cpu":
        return True
    if device_type == "cuda":
        return torch.cuda.is_available()
    if device_type == "xpu":
        xpu = _module("xpu")
        return xpu is not None and bool(xpu.is_available())
    if device_type == "mps":
        mps = getattr(torch.backends, "mps", None)
        return mps is not None and bool(mps.is_available())
    return False


def device_count(device_type: str) -> int:
    """How many ``device_type`` devices are visible (MPS: at most one; CPU: one)."""
    if device_type == "cpu":
        return 1
    if not is_available(device_type):
        return 0
    if device_type == "mps":
        return 1
    module = _module(device_type)
    return int(module.device_count()) if module is not None else 0


def unavailable_reason(device_type: str) -> str:
    """Why ``device_type`` is not available here, in words (for an error message)."""
    version = torch.__version__
    if device_type == "cuda":
        if is_rocm():
            return "no AMD GPU is visible to this ROCm build (check the driver and HIP_VISIBLE_DEVICES)"
        if torch.version.cuda is None:
            return f"this PyTorch build ({version}) has no CUDA or ROCm support"
        return "no CUDA device is visible (check the driver and CUDA_VISIBLE_DEVICES)"
    if device_type == "xpu":
        if _module("xpu") is None or not getattr(torch._C, "_has_xpu", False):
            return f"this PyTorch build ({version}) has no Intel XPU support (install an XPU build)"
        return "no Intel GPU is visible (check the Level Zero driver and ZE_AFFINITY_MASK)"
    if device_type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_built():
            return (
                f"this PyTorch build ({version}) has no MPS support (Apple GPUs need PyTorch for "
                "macOS on Apple silicon)"
            )
        return "MPS is built in but not usable here (it needs macOS 12.3+ on Apple silicon)"
    return f"ampkit has no rules for device type {device_type!r}"


def default_device() -> torch.device:
    """The device ``device=None`` means: the current CUDA (or ROCm) device, else the current
    Intel XPU, else Apple MPS, else the CPU."""
    for kind in ACCELERATORS:
        if is_available(kind):
            if kind == "mps":
                return torch.device("mps")
            return torch.device(kind, _require(kind).current_device())
    return torch.device("cpu")


def set_current_device(device_type: str, index: int) -> None:
    """Make ``index`` the current device of ``device_type`` (a no-op on the CPU and MPS)."""
    if device_type in ("cuda", "xpu"):
        module = _module(device_type)
        if module is not None:
            module.set_device(index)


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (a no-op on the CPU)."""
    if device.type in ("cuda", "xpu"):
        module = _module(device.type)
        if module is not None:
            module.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def has_peak_memory_counter(device: torch.device) -> bool:
    """Whether torch keeps a resettable peak of allocated tensor memory for ``device``:
    CUDA/ROCm always, XPU where ``torch.xpu`` has the memory API (torch 2.5+); MPS and the CPU
    have none."""
    if device.type == "cuda":
        return True
    if device.type == "xpu":
        xpu = _module("xpu")
        return xpu is not None and hasattr(xpu, "max_memory_allocated")
    return False


def memory_allocated(device: torch.device) -> int | None:
    """Bytes of tensors allocated on ``device`` now; None where torch does not count them
    (the CPU)."""
    if device.type in ("cuda", "xpu"):
        module = _module(device.type)
        if module is not None and hasattr(module, "memory_allocated"):
            return int(module.memory_allocated(device))
        return None
    if device.type == "mps":
        return int(torch.mps.current_allocated_memory())
    return None


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window (CUDA, XPU). MPS has no peak counter and the CPU's peak
    RSS cannot be reset, so both are a no-op."""
    if has_peak_memory_counter(device):
        _require(device.type).reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> tuple[int, str]:
    """Peak memory in bytes and what was measured.

    CUDA/ROCm and XPU: ``max_memory_allocated`` (tensors only, since the last reset). MPS:
    ``torch.mps.driver_allocated_memory`` now (torch.mps keeps no peak; this is what the Metal
    driver holds for the process, caches included). CPU: the process's peak resident set size
    (everything the process ever held).
    """
    if has_peak_memory_counter(device):
        module = _require(device.type)
        label = "CUDA" if device.type == "cuda" else "XPU"
        return int(module.max_memory_allocated(device)), f"{label} max_memory_allocated"
    if device.type == "mps":
        return int(torch.mps.driver_allocated_memory()), "MPS driver_allocated_memory (no peak)"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return rss * scale, "process peak RSS"


def device_rng_states() -> dict[str, list[torch.Tensor]]:
    """The generator states of every accelerator backend in use, by device type.

    CUDA/ROCm and XPU: one state per device, only once the backend is initialised (asking
    would otherwise initialise it). MPS: its one generator, where MPS is available.
    """
    states: dict[str, list[torch.Tensor]] = {}
    for kind in ("cuda", "xpu"):
        module = _module(kind)
        if (
            module is not None
            and is_available(kind)
            and getattr(module, "is_initialized", lambda: False)()
        ):
            states[kind] = list(module.get_rng_state_all())
    if is_available("mps"):
        states["mps"] = [torch.mps.get_rng_state()]
    return states


def set_device_rng_states(states: dict[str, Any]) -> None:
    """Restore states from :func:`device_rng_states`; backends absent here are skipped (a run
    saved on a GPU resumes on a CPU with the CPU's generators only)."""
    for kind in ("cuda", "xpu"):
        module = _module(kind)
        if kind in states and module is not None and is_available(kind):
            module.set_rng_state_all(states[kind])
    if "mps" in states and is_available("mps"):
        torch.mps.set_rng_state(states["mps"][0])


@contextlib.contextmanager
def fork_rng(device: torch.device) -> Iterator[None]:
    """Run a block and restore the CPU generator and ``device``'s generator afterwards.

    Like ``torch.random.fork_rng``, for the one device a run uses, on any backend (torch's
    ``device_type`` argument is CUDA-centred in torch 2.5).
    """
    cpu_state = torch.get_rng_state()
    saved: torch.Tensor | None = None
    module = _module(device.type)
    index = device.index or 0
    if device.type in ("cuda", "xpu") and module is not None and is_available(device.type):
        saved = module.get_rng_state(index)
    elif device.type == "mps" and is_available("mps"):
        saved = torch.mps.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(cpu_state)
        if saved is not None:
            if device.type == "mps":
                torch.mps.set_rng_state(saved)
            else:
                _require(device.type).set_rng_state(saved, index)


def fused_unscale_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``torch._amp_foreach_non_finite_check_and_unscale_`` (the loss scaler's fused
    unscale) is safe for ``dtype`` gradients on ``device``.

    CUDA/ROCm, XPU (torch-xpu-ops) and the CPU have the kernel in every supported torch. MPS
    gained it in torch 2.8 (pytorch#150255); its fp16/bf16 path multiplied by a mis-typed
    scale (pytorch#184286), so there only fp32 gradients (what mixed precision produces) use it.
    """
    if device.type != "mps":
        return True
    numbers = torch.__version__.split("+", 1)[0].split(".")[:2]
    try:
        recent = (int(numbers[0]), int(numbers[1])) >= (2, 8)
    except (IndexError, ValueError):
        recent = True
    return recent and dtype == torch.float32


def autocast_device_type(device: torch.device) -> str:
    """The ``device_type`` of ``torch.autocast`` for ``device``: its type for cpu, cuda (ROCm
    too), xpu and mps. Other types have no autocast rules here and get ``cpu``'s."""
    return device.type if device.type in ("cpu", *ACCELERATORS) else "cpu"


def distributed_backend(device_type: str) -> str:
    """The ``torch.distributed`` backend for ``device_type``: ``nccl`` on CUDA (RCCL under
    ROCm, which torch also calls nccl), ``xccl`` on XPU where this torch has it (2.8+), else
    ``gloo`` (CPU, MPS, older XPU builds)."""
    if device_type == "cuda":
        return "nccl"
    if device_type == "xpu":
        check = getattr(torch.distributed, "is_xccl_available", None)
        if check is not None and check():
            return "xccl"
    return "gloo"


def collective_device(backend: str) -> torch.device:
    """The device a tensor must be on for a collective of ``backend``: the current CUDA device
    for ``nccl``, the current XPU for ``xccl``, else the CPU (``gloo``)."""
    kind = {"nccl": "cuda", "xccl": "xpu"}.get(str(backend))
    if kind is None or not is_available(kind):
        return torch.device("cpu")
    return torch.device(kind, _require(kind).current_device())


def ddp_device_ids(device: torch.device, local_rank: int) -> list[int] | None:
    """``device_ids`` for ``DistributedDataParallel``: the local rank on CUDA and XPU, None
    (the module's own device) on the CPU and MPS."""
    return [local_rank] if device.type in ("cuda", "xpu") else None


def non_blocking_copy(device: torch.device) -> bool:
    """Whether host-to-``device`` copies should go through pinned memory without blocking:
    CUDA/ROCm only. MPS shares memory with the CPU; XPU pinning needs a device argument
    torch 2.5's ``Tensor.pin_memory`` lacks."""
    return device.type == "cuda"


def loader_defaults(device: torch.device, cpus: int) -> tuple[bool, int]:
    """``(pin_memory, num_workers)`` defaults of a DataLoader feeding ``device``.

    Pinned memory on CUDA/ROCm (:func:`non_blocking_copy`); ``min(4, cpus // 2)`` worker
    processes on any accelerator, 0 on the CPU (workers would compete with the training
    threads for the same cores).
    """
    workers = min(4, cpus // 2) if is_accelerator(device) else 0
    return non_blocking_copy(device), workers
