"""Shared fixtures: every test starts and ends with torch's global state untouched."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def restore_torch_globals() -> Iterator[None]:
    """Restore the global torch settings a test (or ampkit) might change, and the RNG."""
    saved = (
        torch.get_default_dtype(),
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
        torch.is_grad_enabled(),
        torch.are_deterministic_algorithms_enabled(),
        torch.get_rng_state(),
    )
    yield
    torch.set_default_dtype(saved[0])
    torch.set_float32_matmul_precision(saved[1])
    torch.backends.cudnn.allow_tf32 = saved[2]
    torch.backends.cudnn.benchmark = saved[3]
    torch.set_grad_enabled(saved[4])
    torch.use_deterministic_algorithms(saved[5])
    torch.set_rng_state(saved[6])


#: Markers whose tests run only when ``-m`` names them: ``timing`` tests assert on a measured
#: time or speed-up, which a loaded machine changes; the ``readme`` test runs the README's
#: shell steps for minutes.
OPT_IN = ("timing", "readme")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the :data:`OPT_IN` tests unless ``-m`` names their marker; skip ``gpu`` tests
    without a CUDA device.

    An opt-in test never runs by default (``python -m pytest``, or ``-m "not slow"``), only
    when asked for (``-m timing``, ``-m readme``).
    """
    expression = config.getoption("markexpr") or ""
    for marker in OPT_IN:
        if marker in expression:
            continue
        left_out = [item for item in items if item.get_closest_marker(marker)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if not item.get_closest_marker(marker)]
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
