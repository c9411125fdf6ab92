"""``ampkit lint``: a static checker for mixed-precision (AMP) mistakes in PyTorch code.

Pure static analysis with :mod:`ast` (torch is never imported). Entry points:

* :func:`check_source` lints one source text and returns :class:`Finding` objects;
* :func:`check_paths` lints files and folders;
* :func:`fix_source` rewrites what is safe to rewrite (the deprecated ``torch.cuda.amp`` API).

Every rule is a class in :mod:`ampkit.lint.rules` whose docstring documents it;
``ampkit lint --explain CODE`` prints it.
"""

from __future__ import annotations

from ampkit.lint.api import check_paths
from ampkit.lint.check import check_source
from ampkit.lint.findings import Edit, Finding, Fix, Severity
from ampkit.lint.fix import fix_source
from ampkit.lint.rules import RULES
from ampkit.lint.selection import Selection

__all__ = [
    "RULES",
    "Edit",
    "Finding",
    "Fix",
    "Selection",
    "Severity",
    "check_paths",
    "check_source",
    "fix_source",
]
