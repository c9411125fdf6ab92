"""``ampkit compare``: where two settings of one model first part ways.

Runs one batch of the same model, from the same weights, under two settings (two precisions,
eager and ``torch.compile``, two checkpoints), records every module's output and parameter
gradients (:mod:`ampkit.divergence.recording`: hashes, ranges and a bounded sample), and reports the
first module whose output leaves the expected error of the narrower format, the first gradients
that do, and the modules that add the most error (:mod:`ampkit.divergence.diff`). A side can be
recorded to a folder in one process (:func:`record`) and compared in another
(:func:`compare_records`), so the two sides may run on different machines.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ampkit._files import json_safe
from ampkit.divergence.diff import DEFAULT_FACTOR, Diff, EntryDiff, diff_records
from ampkit.divergence.page import render_html, render_text
from ampkit.divergence.recording import Record, load_record
from ampkit.divergence.settings import Setting, parse_setting
from ampkit.errors import ConfigurationError

__all__ = [
    "CompareReport",
    "EntryDiff",
    "Record",
    "Setting",
    "compare",
    "compare_records",
    "load_record",
    "parse_setting",
    "record",
]


@dataclass(frozen=True)
class CompareReport:
    """The comparison of two sides, renderable as text, JSON and one HTML page.

    Attributes:
        diff: the data (:class:`~ampkit.divergence.diff.Diff`): every tensor's error, ``first``
            (the first forward output beyond the tolerance), ``first_grad``, ``contributors``.
    """

    diff: Diff

    @property
    def first(self) -> EntryDiff | None:
        """The first module output that parts (None: none does)."""
        return self.diff.first

    @property
    def first_grad(self) -> EntryDiff | None:
        """The first module, in backward order, whose parameter gradients part."""
        return self.diff.first_grad

    @property
    def parted(self) -> bool:
        """Whether any output or gradient left the tolerance."""
        return self.diff.parted

    def to_text(self) -> str:
        return render_text(self.diff)

    def to_dict(self) -> dict[str, Any]:
        return json_safe(self.diff.to_dict())

    def to_json(self, path: str | Path | None = None) -> str:
        """The JSON document; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, allow_nan=False)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    def render_html(self) -> str:
        return render_html(self.diff)

    def to_html(self, path: str | Path) -> Path:
        """Write the page (parent folders are created); return the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.render_html(), encoding="utf-8")
        return target

    def _repr_html_(self) -> str:
        return self.render_html()


def _check_factor(tolerance: float) -> None:
    from ampkit._validate import is_number

    if not is_number(tolerance, 0, open_low=True):
        raise ConfigurationError(
            f"tolerance: {tolerance!r} is invalid. Use a positive number (the tolerance in "
            f"units of the narrower format's eps; default {DEFAULT_FACTOR:g}).",
            argument="tolerance",
        )


def _built(model: Any, batch: Any, loss_fn: Any, seed: int, batch_size: int | None) -> Any:
    """A :class:`~ampkit.models.built.BuiltModel` of a ``--model`` string, or of a module and
    one batch."""
    from torch import nn

    from ampkit.models.built import BuiltModel, model_error
    from ampkit.models.resolve import build_model
    from ampkit.precision.batches import batch_size_of

    if isinstance(model, str):
        if batch is not None:
            raise model_error("a model string brings its own batches: drop batch=.")
        return build_model(model, seed=seed, batch_size=batch_size)
    if not isinstance(model, nn.Module):
        raise model_error(
            f"got {type(model).__name__}. Pass a --model string (gpt, hf:gpt2:tiny, "
            "package.module:factory) or a torch.nn.Module with batch=."
        )
    if batch is None:
        raise model_error("a module needs batch= (the inputs, or (inputs, targets) with loss_fn).")
    size = batch_size_of(batch)
    return BuiltModel(
        name=type(model).__name__,
        model=model,
        batch=lambda step: batch,
        loss_fn=loss_fn,
        items_per_step=size,
        batch_size=size,
    )


def record(
    model: Any,
    setting: str,
    *,
    out: str | Path | None = None,
    batch: Any = None,
    loss_fn: Callable[[Any, Any], Any] | None = None,
    device: str | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    max_values: int = 4096,
) -> Record:
    """Record one side (one forward and backward under ``setting``); write it to ``out``.

    Args:
        model: a ``--model`` string (``gpt``, ``hf:gpt2:tiny``, ``package.module:factory``) or
            an ``nn.Module`` (then ``batch`` is its one batch, and ``loss_fn`` as the Trainer's).
        setting: ``PRECISION[+compile][@WEIGHTS]`` (:func:`parse_setting`).
        out: a folder to write the record to (``compare_records`` reads it).
        device: where to run (default: cpu); the record says where it ran.
        seed: seeds the weights and batches of built-in and library models.
        max_values: values kept per tensor for the error statistics.

    Raises:
        ConfigurationError: an unknown setting or model, batch= missing for a module.
        UnsupportedPrecisionError: the device cannot run the precision.
    """
    from ampkit.divergence.run import record_setting

    parsed = parse_setting(setting, "setting")
    if not isinstance(max_values, int) or isinstance(max_values, bool) or max_values < 16:
        raise ConfigurationError(
            f"max_values: {max_values!r} is invalid. Use an integer >= 16.", argument="max_values"
        )
    built = _built(model, batch, loss_fn, seed, batch_size)
    result = record_setting(built, parsed, device=device or "cpu", max_values=max_values)
    if out is not None:
        result.save(out)
    return result


def compare_records(
    a: str | Path | Record, b: str | Path | Record, *, tolerance: float = DEFAULT_FACTOR
) -> CompareReport:
    """Compare two records (folders written by :func:`record` or ``--record``, or records).

    Raises:
        ConfigurationError: a folder holds no record; the tolerance is not positive.
        DataError: a record is damaged.
    """
    _check_factor(tolerance)
    side_a = a if isinstance(a, Record) else load_record(a)
    side_b = b if isinstance(b, Record) else load_record(b)
    if side_a.meta.get("model") != side_b.meta.get("model"):
        raise ConfigurationError(
            f"records: {side_a.meta.get('model')!r} and {side_b.meta.get('model')!r} are "
            "different models. Record the same --model on both sides."
        )
    return CompareReport(diff_records(side_a, side_b, factor=tolerance))


def compare(
    model: Any = "gpt",
    a: str = "fp32",
    b: str = "bf16",
    *,
    batch: Any = None,
    loss_fn: Callable[[Any, Any], Any] | None = None,
    device: str | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    tolerance: float = DEFAULT_FACTOR,
    max_values: int = 4096,
    progress: Callable[[str, int, int], None] | None = None,
) -> CompareReport:
    """Run ``model`` on one batch under settings ``a`` (the reference) and ``b`` and say where
    they part. Arguments as :func:`record`; ``tolerance`` is in units of the narrower compute
    format's eps (default 8).

    Raises:
        ConfigurationError: an unknown setting or model, a tolerance that is not positive.
        UnsupportedPrecisionError: the device cannot run a precision.
    """
    _check_factor(tolerance)
    parse_setting(a, "a"), parse_setting(b, "b")  # both spellings checked before any work
    sides = []
    for index, setting in enumerate((a, b)):
        sides.append(
            record(
                model,
                setting,
                batch=batch,
                loss_fn=loss_fn,
                device=device,
                seed=seed,
                batch_size=batch_size,
                max_values=max_values,
            )
        )
        if progress is not None:
            progress("sides", index + 1, 2)
    return compare_records(sides[0], sides[1], tolerance=tolerance)
