"""Where autocast put each module: the dtypes every module actually saw and produced.

Autocast decides per *op*, not per module: on CUDA matmuls and convolutions run in the low
precision while norms, softmax and losses run in fp32; CPU autocast keeps LayerNorm in its
input's dtype. The only way to know what happened to a given model is to run it and look, which
:func:`precision_map` does with forward hooks (no backward, no gradients).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from ampkit._text_table import text_table
from ampkit._tree import floating_tensors
from ampkit.doctor.hooks import observe
from ampkit.doctor.rows import MapRow
from ampkit.precision.policy import Policy

__all__ = ["format_precision_map", "precision_map"]


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class _DtypeObserver:
    def __init__(self) -> None:
        self.rows: dict[str, MapRow] = {}

    def before_forward(self, name: str, module: nn.Module, args: object, kwargs: object) -> None:
        return None

    def after_forward(
        self, name: str, module: nn.Module, args: object, kwargs: object, output: object
    ) -> None:
        if name in self.rows:
            return
        outputs = floating_tensors(output)
        self.rows[name] = MapRow(
            module=name,
            type=type(module).__name__,
            inputs=tuple(_short(t.dtype) for t in floating_tensors((args, kwargs))),
            output=_short(outputs[0].dtype) if outputs else None,
            params=tuple(sorted({_short(p.dtype) for p in module.parameters(recurse=False)})),
            finite=all(bool(torch.isfinite(t).all()) for t in outputs),
        )

    def param_grad(self, name: str, module: nn.Module, grad: torch.Tensor) -> None:
        return None


def precision_map(
    model: nn.Module, closure: Callable[[], object], policy: Policy
) -> tuple[MapRow, ...]:
    """Run ``closure`` once under ``policy``'s autocast (no grad) and record dtypes per module.

    Only each module's first call is recorded. Modules that did not run are left out.
    """
    observer = _DtypeObserver()
    with observe(model, observer, params=False), torch.no_grad(), policy.autocast():
        closure()
    order = [name for name, _ in model.named_modules()]
    return tuple(observer.rows[n] for n in order if n in observer.rows)


def format_precision_map(rows: Sequence[MapRow]) -> str:
    """A fixed-width table: module, type, input dtypes, output dtype, parameter dtypes."""
    header = ("module", "type", "inputs", "output", "params", "finite")
    body = [
        (
            r.module or "(model)",
            r.type,
            ",".join(dict.fromkeys(r.inputs)) or "-",
            r.output or "-",
            ",".join(r.params) or "-",
            "yes" if r.finite else "NO",
        )
        for r in rows
    ]
    return "\n".join(text_table([header, *body]))
