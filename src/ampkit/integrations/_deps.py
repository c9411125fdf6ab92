"""Importing an integration's library, or one line saying which extra installs it."""

from __future__ import annotations

import importlib
from types import ModuleType

from ampkit.errors import MissingDependencyError

__all__ = ["require"]


def require(module: str, *, feature: str, extra: str) -> ModuleType:
    """Import ``module``, or raise a one-line error naming the pip extra.

    Args:
        module: the import name (``"transformers"``, ``"lightning.pytorch"``, ``"mlflow"``).
        feature: what needs it, as the message's subject (``"AmpkitCallback"``).
        extra: the ampkit extra that installs it (``"hf"``, ``"lightning"``, ``"mlflow"``).

    Raises:
        MissingDependencyError: the module cannot be imported.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{feature}: needs the {module.split('.')[0]!r} package, which cannot be imported "
            f"here ({exc}). Install it: pip install 'ampkit[{extra}]'."
        ) from None
