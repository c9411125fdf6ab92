"""Capture and restore every random-number generator a training run draws from.

States are stored as tensors, lists and numbers only, so they load with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import random
from typing import Any, cast

import numpy as np
import torch

from ampkit.precision import devices

__all__ = ["get_rng_state", "reseed", "set_rng_state"]


def get_rng_state() -> dict[str, Any]:
    """Python, NumPy, torch CPU and (when initialised) accelerator generator states
    (``cuda``, ``xpu``, ``mps``: :func:`ampkit.precision.devices.device_rng_states`)."""
    version, mt_state, gauss = random.getstate()
    legacy = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state(legacy=True))
    kind, keys, pos, has_gauss, cached = legacy
    state: dict[str, Any] = {
        "python": [version, list(mt_state), gauss],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    state.update(devices.device_rng_states())
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore generators from :func:`get_rng_state` output."""
    version, mt_state, gauss = state["python"]
    random.setstate((version, tuple(mt_state), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    devices.set_device_rng_states(state)


def reseed(seed: int, step: int, rank: int) -> int:
    """Seed Python, NumPy and torch (CUDA included) from ``(seed, step, rank)``, for a rank
    whose saved RNG state cannot carry over (a resume on more processes); return the seed."""
    import hashlib

    digest = hashlib.sha256(f"ampkit-rng:{seed}:{step}:{rank}".encode()).digest()
    derived = int.from_bytes(digest[:8], "little") >> 1
    random.seed(derived)
    np.random.seed(derived % 2**32)
    torch.manual_seed(derived)
    return derived
