"""Time one Linear's forward+backward in bf16 and in fp8 at a real batch shape (CUDA only).

Both variants are compiled (eager fp8 pays separate cast kernels and is slower than bf16),
run interleaved, and timed with CUDA events; the median of the rounds is kept.
"""

from __future__ import annotations

import copy
import functools
import statistics
from collections.abc import Callable

import torch
from torch import nn

from ampkit.errors import ConfigurationError
from ampkit.precision.fp8.convert import convert_to_fp8

__all__ = ["time_linear"]


def _timed(fn: Callable[[], None], device: torch.device) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(torch.cuda.current_stream(device))
    fn()
    end.record(torch.cuda.current_stream(device))
    end.synchronize()
    return start.elapsed_time(end)


def time_linear(
    tokens: int,
    in_features: int,
    out_features: int,
    recipe: str,
    device: torch.device,
    *,
    rounds: int = 20,
    warmup: int = 3,
    compile: bool = True,
) -> tuple[float, float]:
    """Milliseconds per forward+backward of a ``Linear(in_features, out_features)`` on a
    ``(tokens, in_features)`` input: ``(bf16 autocast, fp8)``, medians of ``rounds``.

    Raises:
        ConfigurationError: ``device`` is not a CUDA device.
    """
    if device.type != "cuda":
        raise ConfigurationError(
            f"fp8 microbenchmark: device {device} is not CUDA; fp8 speed can only be measured "
            "on a GPU with fp8 tensor cores."
        )
    bf16 = nn.Linear(in_features, out_features, bias=False, device=device)
    fp8 = copy.deepcopy(bf16)
    holder = nn.Sequential(fp8)
    convert_to_fp8(holder, ["0"], recipe)
    x = torch.randn(tokens, in_features, device=device, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(tokens, out_features, device=device, dtype=torch.bfloat16)
    layers = {"bf16": bf16, "fp8": holder}
    steps = {name: torch.compile(layer) if compile else layer for name, layer in layers.items()}

    def step(name: str) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = steps[name](x)
        out.backward(grad)
        x.grad = None
        for p in layers[name].parameters():
            p.grad = None

    times: dict[str, list[float]] = {"bf16": [], "fp8": []}
    for i in range(warmup + rounds):
        for name in ("bf16", "fp8") if i % 2 == 0 else ("fp8", "bf16"):
            ms = _timed(functools.partial(step, name), device)
            if i >= warmup:
                times[name].append(ms)
    return statistics.median(times["bf16"]), statistics.median(times["fp8"])
