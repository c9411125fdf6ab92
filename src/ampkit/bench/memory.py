"""Memory a training step needs, measured per variant even when variants share a process.

CPU: the bytes of the tensors autograd saves for backward, counted with saved-tensor hooks
(:func:`saved_tensor_bytes`). That is the part of a step's memory that precision changes
(activations kept for backward; bf16 halves them) and it is exact and per variant, unlike the
process's peak RSS, which covers everything the process ever held and cannot be reset.

CUDA: ``torch.cuda.max_memory_allocated`` during one step, minus what was allocated when the
step began (other variants' weights live on the same device), plus this variant's own weights
and optimizer state (:func:`cuda_step_peak_bytes`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from ampkit.precision import devices

__all__ = ["cuda_step_peak_bytes", "saved_tensor_bytes", "state_bytes"]


def _storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    storage = tensor.untyped_storage()
    return (str(tensor.device), storage.data_ptr())


def saved_tensor_bytes(
    fn: Callable[[], Any], exclude: Iterable[torch.Tensor] = ()
) -> tuple[Any, int]:
    """Run ``fn()`` and count the bytes autograd saves for backward while it runs.

    Each distinct storage is counted once, at its full size (views of one buffer share it).
    Storages of the tensors in ``exclude`` (pass the model's parameters) are not counted:
    they are held anyway, whether or not autograd keeps a reference. Low-precision copies of
    the weights that autocast makes and saves *are* counted, since they are extra memory.

    Backward itself is unaffected: the hooks return the tensors unchanged.

    Returns:
        ``(fn's return value, bytes)``.
    """
    excluded = {_storage_key(t) for t in exclude}
    seen: dict[tuple[str, int], int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        key = _storage_key(tensor)
        if key not in excluded and key not in seen:
            seen[key] = tensor.untyped_storage().nbytes()
        return tensor

    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        result = fn()
    return result, sum(seen.values())


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> int:
    """Bytes of the model's parameters and buffers and of the optimizer's tensor state."""
    total = sum(t.numel() * t.element_size() for t in model.parameters())
    total += sum(t.numel() * t.element_size() for t in model.buffers())
    if optimizer is not None:
        for state in optimizer.state.values():
            total += sum(
                v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor)
            )
    return total


def cuda_step_peak_bytes(
    step: Callable[[], Any], device: torch.device, own_state_bytes: int
) -> int:
    """Peak CUDA memory of one ``step()`` as if its variant were alone on the device.

    ``max_memory_allocated`` over the step minus ``memory_allocated`` at its start is what
    the step added (activations, gradients, temporaries); ``own_state_bytes`` (from
    :func:`state_bytes`, taken after a warm-up step so the optimizer state exists) adds this
    variant's resident weights and optimizer state back.
    """
    devices.synchronize(device)
    before = devices.memory_allocated(device) or 0
    devices.reset_peak_memory(device)
    step()
    devices.synchronize(device)
    return own_state_bytes + devices.peak_memory(device)[0] - before
