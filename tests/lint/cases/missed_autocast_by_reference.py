# The deprecated autocast handed on as an object: stored, chosen, or partially applied.
import functools
from contextlib import nullcontext

import torch

ctx_factory = torch.cuda.amp.autocast  # expect: AMP006
maybe_autocast = torch.cuda.amp.autocast if fp16 else nullcontext  # expect: AMP006
bf16_autocast = functools.partial(torch.cuda.amp.autocast, dtype=torch.bfloat16)  # expect: AMP006
cpu_ctx = torch.cpu.amp.autocast  # expect: AMP006

with maybe_autocast():
    out = net(batch)


def typed(scaler: torch.cuda.amp.GradScaler) -> None:
    # an annotation or an isinstance check does not call the old API
    assert isinstance(scaler, torch.cuda.amp.GradScaler)
