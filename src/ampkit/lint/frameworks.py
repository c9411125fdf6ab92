"""Training frameworks whose calls stand for a backward pass, an optimizer step or a clip.

Lightning (``self.manual_backward(loss)``, ``self.optimizers()``, ``self.clip_gradients``),
Fabric (``fabric.backward``, ``fabric.clip_gradients``), Accelerate (``accelerator.backward``,
``accelerator.clip_grad_norm_``) and DeepSpeed (``engine.backward``, ``engine.step()``) run
the backward pass themselves, and each of them scales the loss itself when it is configured
for float16 (a Lightning/Fabric ``precision="16-mixed"``, Accelerate
``mixed_precision="fp16"``, a DeepSpeed config with ``"fp16": {"enabled": true}``).

A framework backward is a backward; whether it is an *unscaled* float16 backward depends on
how the framework was configured. :func:`precision_evidence` reads one constructor call and
says what it shows: ``"scales"`` (configured for float16 loss scaling), ``"plain"``
(configured without it) or ``"unknown"`` (from a variable, a config file or ``**kwargs``).
:func:`framework_scales` turns the evidence of a file (or of the linted tree) into a verdict.
Accelerate and DeepSpeed are usually configured outside the code (``accelerate config``, a
JSON file), so only a constructor seen with a literal non-fp16 setting proves they do not
scale; Lightning's and Fabric's default precision is 32-bit, so for them only evidence of
float16 counts.
"""

from __future__ import annotations

import ast
import re

from ampkit.lint.names import Imports

__all__ = [
    "BACKWARD_FRAMEWORKS",
    "CLIP_METHODS",
    "framework_family",
    "framework_of_ctor",
    "framework_of_name",
    "framework_scales",
    "precision_evidence",
]

#: frameworks whose ``obj.backward(loss)`` runs the backward pass
BACKWARD_FRAMEWORKS = frozenset({"lightning", "fabric", "accelerate", "deepspeed"})

#: framework methods that clip gradients (and unscale them first when they scale)
CLIP_METHODS = {
    "lightning": frozenset({"clip_gradients"}),
    "fabric": frozenset({"clip_gradients"}),
    "accelerate": frozenset({"clip_grad_norm_", "clip_grad_value_"}),
}

_LIGHTNING_ROOTS = ("lightning", "pytorch_lightning", "lightning_fabric")
_NAMES = (
    (re.compile(r"(^|_)fabric$", re.IGNORECASE), "fabric"),
    (re.compile(r"(^|_)accelerator$", re.IGNORECASE), "accelerate"),
    (re.compile(r"(^|_)(model_|ds_)?engine$", re.IGNORECASE), "deepspeed"),
)
_SCALING_PRECISIONS = frozenset({16, "16", "16-mixed"})
_UNKNOWN = "unknown"


def _root(qualname: str) -> str:
    return qualname.split(".", 1)[0]


def framework_of_ctor(qualname: str | None) -> str | None:
    """The framework an object built by a call of ``qualname`` belongs to."""
    if qualname is None:
        return None
    last = qualname.rsplit(".", 1)[-1]
    if _root(qualname) in _LIGHTNING_ROOTS and last == "Fabric":
        return "fabric"
    if _root(qualname) == "accelerate" and last == "Accelerator":
        return "accelerate"
    if qualname == "deepspeed.initialize":
        return "deepspeed"
    return None


def framework_of_name(key: str | None) -> str | None:
    """The framework a variable is named after (``fabric``, ``self.accelerator``, ``model_engine``)."""
    if key is None:
        return None
    last = key.rsplit(".", 1)[-1]
    for pattern, framework in _NAMES:
        if pattern.search(last):
            return framework
    return None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def _has_star_kwargs(call: ast.Call) -> bool:
    return any(kw.arg is None for kw in call.keywords)


def _lightning_precision(value: ast.expr | None, star: bool) -> str:
    if value is None:
        return _UNKNOWN if star else "plain"
    if isinstance(value, ast.Constant) and isinstance(value.value, (int, str)):
        return "scales" if value.value in _SCALING_PRECISIONS else "plain"
    return _UNKNOWN


def _deepspeed_config(value: ast.expr | None) -> str:
    if not isinstance(value, ast.Dict):
        return _UNKNOWN
    for key, entry in zip(value.keys, value.values, strict=True):
        if key is None:
            return _UNKNOWN  # ``{**base, ...}``
        if isinstance(key, ast.Constant) and key.value == "fp16":
            if isinstance(entry, ast.Dict):
                for k, v in zip(entry.keys, entry.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == "enabled":
                        if isinstance(v, ast.Constant):
                            return "scales" if v.value else "plain"
                        return _UNKNOWN
            return _UNKNOWN
    return "plain"


def precision_evidence(call: ast.Call, imports: Imports) -> tuple[str, str] | None:
    """``(family, evidence)`` of a framework constructor call, ``None`` for other calls.

    ``family`` is ``"lightning"`` (Trainer, Fabric, LightningCLI and the precision plugins),
    ``"accelerate"`` or ``"deepspeed"``; ``evidence`` is ``"scales"``, ``"plain"`` or
    ``"unknown"`` (see the module docstring).
    """
    qualname = imports.qualname(call.func)
    if qualname is None:
        return None
    last = qualname.rsplit(".", 1)[-1]
    star = _has_star_kwargs(call)
    if _root(qualname) in _LIGHTNING_ROOTS:
        if last in ("Trainer", "Fabric"):
            return "lightning", _lightning_precision(_keyword(call, "precision"), star)
        if last.endswith("LightningCLI"):
            return "lightning", _UNKNOWN
        if "MixedPrecision" in last:
            value = _keyword(call, "precision") or (call.args[0] if call.args else None)
            if value is None:
                return "lightning", _UNKNOWN
            return "lightning", _lightning_precision(value, star)
        return None
    if _root(qualname) == "accelerate" and last == "Accelerator":
        value = _keyword(call, "mixed_precision")
        if value is None:
            return "accelerate", _UNKNOWN  # the environment / ``accelerate config`` decides
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return "accelerate", "scales" if value.value == "fp16" else "plain"
        return "accelerate", _UNKNOWN
    if qualname == "deepspeed.initialize":
        config = _keyword(call, "config") or _keyword(call, "config_params")
        return "deepspeed", _deepspeed_config(config)
    return None


def framework_family(framework: str) -> str:
    """The family whose constructors' evidence speaks for ``framework`` (Fabric is
    Lightning's)."""
    return "lightning" if framework in ("lightning", "fabric") else framework


def framework_scales(framework: str, evidence: dict[str, set[str]]) -> bool:
    """Whether a backward through ``framework`` may scale the loss, given the evidence seen.

    Lightning and Fabric default to 32-bit precision: they may scale only when float16 (or
    a setting that cannot be read) was seen. Accelerate and DeepSpeed are configured outside
    the code as often as in it: they are taken not to scale only when every constructor seen
    sets a literal non-float16 precision.
    """
    seen = evidence.get(framework_family(framework), set())
    if framework_family(framework) == "lightning":
        return bool(seen & {"scales", _UNKNOWN})
    return not seen or seen != {"plain"}
