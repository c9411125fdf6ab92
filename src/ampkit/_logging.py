"""Keeping other libraries' import-time chatter off the user's terminal, for one call only."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

__all__ = ["THIRD_PARTY_NOISE", "quiet_loggers"]

#: Loggers that print notes at import or export time which say nothing about the user's run:
#: torchao (one warning per optional CUDA kernel library it cannot load, e.g. on a CPU, when
#: transformers imports it), torch's pytree registry (deprecation notes torchao triggers) and
#: the ONNX exporter's registry ("torchvision is not installed. Skipping ...") and onnxscript's
#: constant folder ("Evaluation failed: ..." when it leaves a node unfolded, which is harmless).
THIRD_PARTY_NOISE: tuple[str, ...] = ("torchao", "torch.utils._pytree", "torch.onnx", "onnxscript")


@contextlib.contextmanager
def quiet_loggers(*names: str, level: int = logging.ERROR) -> Iterator[None]:
    """Raise the named loggers to ``level`` inside the block; their levels are restored after
    it, also on error. Errors still reach the user."""
    loggers = [logging.getLogger(name) for name in names or THIRD_PARTY_NOISE]
    saved = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(level)
    try:
        yield
    finally:
        for logger, before in zip(loggers, saved, strict=True):
            logger.setLevel(before)
