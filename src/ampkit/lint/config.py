"""Project settings for ``ampkit lint`` from ``[tool.ampkit.lint]`` in ``pyproject.toml``.

Like ruff, the nearest ``pyproject.toml`` (searching upwards from the working folder) is
used; command-line options extend it (``--select`` replaces the configured selection,
``--ignore`` and ``--exclude`` add to the configured lists)::

    [tool.ampkit.lint]
    select = ["AMP0"]
    ignore = ["AMP012"]
    exclude = ["legacy/*", "*_pb2.py"]
    max-file-size = 20      # MB; files above it are one AMP000 finding (0: no limit)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from ampkit._validate import is_number
from ampkit.errors import ConfigurationError

__all__ = ["LintConfig", "find_config", "load_config"]

_KEYS = ("select", "ignore", "exclude", "max-file-size")


@dataclass(frozen=True)
class LintConfig:
    """Settings read from a ``pyproject.toml`` (empty when there is none)."""

    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_file_mb: float | None = None
    source: Path | None = field(default=None, compare=False)


def find_config(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` at or above ``start`` that has ``[tool.ampkit.lint]``."""
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                text = candidate.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if "ampkit.lint" in text:
                return candidate
    return None


def _strings(path: Path, key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigurationError(
        f"{path}: [tool.ampkit.lint] {key} must be a list of strings, got {value!r}; "
        f'write e.g. {key} = ["AMP001"]'
    )


def load_config(start: Path | None = None) -> LintConfig:
    """Read ``[tool.ampkit.lint]`` from the nearest ``pyproject.toml`` (Python 3.11+).

    Raises:
        ConfigurationError: the file is not valid TOML or has unknown keys or bad values.
    """
    path = find_config((start or Path.cwd()).resolve())
    if path is None or sys.version_info < (3, 11):
        return LintConfig()
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}; fix the TOML syntax") from exc
    section = data.get("tool", {}).get("ampkit", {}).get("lint", {})
    if not isinstance(section, dict):
        raise ConfigurationError(f"{path}: [tool.ampkit.lint] must be a table")
    unknown = sorted(set(section) - set(_KEYS))
    if unknown:
        raise ConfigurationError(
            f"{path}: unknown key(s) {', '.join(unknown)} in [tool.ampkit.lint]; "
            f"allowed keys are {', '.join(_KEYS)}"
        )
    select = _strings(path, "select", section["select"]) if "select" in section else None
    size = section.get("max-file-size")
    if size is not None and not is_number(size, 0):
        raise ConfigurationError(
            f"{path}: [tool.ampkit.lint] max-file-size must be a number of megabytes >= 0 "
            f"(0: no limit), got {size!r}; write e.g. max-file-size = 20"
        )
    return LintConfig(
        select=select,
        ignore=_strings(path, "ignore", section.get("ignore", [])),
        exclude=_strings(path, "exclude", section.get("exclude", [])),
        max_file_mb=None if size is None else float(size),
        source=path,
    )
