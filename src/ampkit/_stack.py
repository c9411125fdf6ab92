"""Where a warning should point: the first caller outside ampkit."""

from __future__ import annotations

import os
import sys

__all__ = ["user_stacklevel"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` made by the calling ampkit function so that
    the warning names the user's line, however deep inside ampkit the call was made
    (``MixedPrecision`` -> ``resolve_precision`` -> ...)."""
    frame = sys._getframe(1)  # the function that is about to call warnings.warn
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
