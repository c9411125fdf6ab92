"""Whether the PyTorch ampkit needs is installed, asked without importing it.

ampkit declares no dependency on torch (as torchao does): a resolver would otherwise pick a
torch build for you, often a multi-GB CUDA one, and the linter needs no torch at all, so
``pip install ampkit`` (and the pre-commit hook) installs the linter alone. Everything else
needs the torch build for your machine, installed first; :func:`require_torch` says so in one
line instead of a ``ModuleNotFoundError`` from deep inside.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re

from ampkit.errors import MissingDependencyError

__all__ = ["MIN_TORCH", "require_torch", "torch_missing_message"]

#: The oldest PyTorch ampkit supports.
MIN_TORCH = (2, 5)

_INSTALL = (
    "Install the PyTorch build for your machine first (https://pytorch.org; on a CPU: "
    "pip install torch --index-url https://download.pytorch.org/whl/cpu), or "
    "pip install 'ampkit[torch]'"
)


def torch_missing_message(what: str = "this") -> str:
    """The one line that says ``what`` needs PyTorch and how to get it."""
    return f"{what} needs PyTorch, which is not installed. {_INSTALL}. (ampkit lint does not.)"


def require_torch(what: str = "this") -> None:
    """Refuse to go on without a supported torch (looked up, not imported).

    Raises:
        MissingDependencyError: torch is not installed, or older than :data:`MIN_TORCH`.
    """
    if importlib.util.find_spec("torch") is None:
        raise MissingDependencyError(torch_missing_message(what))
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # a source build without metadata
        return
    found = re.match(r"(\d+)\.(\d+)", version)
    if found and (int(found.group(1)), int(found.group(2))) < MIN_TORCH:
        raise MissingDependencyError(
            f"{what} needs PyTorch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer, but torch {version} "
            f"is installed. Upgrade it ({_INSTALL})."
        )
