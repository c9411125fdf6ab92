"""A gloo process group for an ``mp.spawn`` test worker that makes its own (no Trainer)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch.distributed as dist

#: How long the worker releases the GIL after destroying its group (see :func:`gloo_group`).
GRACE_S = 1.0


@contextmanager
def gloo_group(rank: int, world_size: int, store: str, timeout_s: float = 60) -> Iterator[None]:
    """Join a gloo group through the file ``store``; destroy it on the way out, then sleep.

    The sleep releases the GIL, so gloo's worker threads drop their last collective's tensors
    now: a DDP model freed later (when the worker returns) holds the group's last reference,
    and its destructor joins those threads with the GIL held (a hang), or, at interpreter
    exit, they cannot take the GIL and abort ("terminate called without an active
    exception"). ampkit's Trainer does the same in ``close()`` and at exit.
    """
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    try:
        yield
    finally:
        dist.destroy_process_group()
        time.sleep(GRACE_S)
