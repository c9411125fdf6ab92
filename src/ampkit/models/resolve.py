"""``--model`` strings: the one resolver of ``ampkit bench``, ``ampkit doctor`` and
``ampkit export``.

:func:`build_model` turns a string into a :class:`~ampkit.models.built.BuiltModel`: a model, a
deterministic batch for every step, how the batch becomes a loss (the batch convention of
:mod:`ampkit.precision.batches`, so ``Trainer(built.model, ..., loss_fn=built.loss_fn)`` trains
it on ``built.batch``) and what one step is. Accepted strings:

* ``gpt``: the built-in GPT on the standard-library byte corpus, the same model in every command
  (:data:`~ampkit.models.builtin.GPT_DEFAULTS`);
* ``convnet``: a small image classifier on random labelled images;
* ``hf:<name>[:options]``: a Hugging Face ``transformers`` model built from the library's config
  with random weights (``hf:gpt2``, ``hf:bert-base-uncased``, ``hf:t5-small:tiny``; see
  :mod:`ampkit.models.library`), needs ``pip install 'ampkit[hf]'``;
* ``hf:<local folder>``: a model saved with ``save_pretrained``, with its weights and (when the
  folder holds one) its tokenizer;
* ``timm:<name>[:options]``: ``timm.create_model(name, pretrained=False)``;
* ``package.module:factory``: your function, imported from the current folder first (as
  ``python -m`` does) or the installed packages. It returns a :class:`BuiltModel`,
  ``(model, batch)`` (the model consumes the batch and returns its loss: a scalar, ``.loss``,
  a dict with ``"loss"``...), or ``(model, inputs, targets)`` (cross-entropy on the output's
  logits for integer targets, mean squared error for float targets; dict inputs are passed as
  keyword arguments). It is called as ``factory(batch_size=N)`` when it takes ``batch_size``
  and one was given.

Nothing is downloaded: library models get random weights, seeded by ``seed``.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
from typing import Any

import torch
from torch import nn

from ampkit._tree import iter_tensors
from ampkit._validate import is_int
from ampkit.errors import AmpkitError, ConfigurationError
from ampkit.models.built import BuiltModel, call_model, logits_loss, model_error, refuse_meta
from ampkit.models.builtin import BUILTINS, ConvNet, convnet_model, gpt_model
from ampkit.precision.batches import batch_size_of

__all__ = [
    "BUILTIN_MODELS",
    "BuiltModel",
    "ConvNet",
    "build_model",
    "call_factory",
    "call_model",
    "convnet_model",
    "from_factory_result",
    "gpt_model",
    "is_closure_form",
    "is_factory_spec",
    "logits_loss",
]

#: The model names that need no import (the registry of :mod:`ampkit.models.builtin`).
BUILTIN_MODELS = tuple(BUILTINS)

_FORMS = (
    f"{', '.join(BUILTIN_MODELS)}, hf:<name> (e.g. hf:gpt2), timm:<name>, or "
    "package.module:factory (a function returning (model, batch), (model, inputs, targets) "
    "or an ampkit.models.resolve.BuiltModel)"
)

_LIBRARIES = ("hf", "timm")


def is_factory_spec(spec: str) -> bool:
    """Whether ``spec`` names a ``package.module:factory`` (not a built-in or library model)."""
    return ":" in spec and spec.partition(":")[0] not in _LIBRARIES


def _import_module(spec: str, module_name: str) -> Any:
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise model_error(  # the user's module exists but imports something missing
                f"importing module {module_name!r} for {spec} failed: it imports "
                f"{exc.name!r}, which is not installed. Install it, then run the command again."
            ) from None
        raise model_error(
            f"cannot import module {module_name!r} (no module named {exc.name!r}). "
            "Run from the folder that holds it, or install its package."
        ) from None
    except (KeyboardInterrupt, AmpkitError):
        raise
    except BaseException as exc:  # SystemExit of a script's argparse, a crash at import
        raise model_error(
            f"importing module {module_name!r} for {spec} raised {_raised(exc)}. Make the "
            "module importable without side effects (a script's own command line under "
            "`if __name__ == '__main__':`), then run the command again."
        ) from None
    finally:
        if added:
            sys.path.remove(cwd)


def call_factory(spec: str, batch_size: int | None = None) -> Any:
    """Import ``package.module:factory`` (current folder first) and return what it returns.

    ``factory(batch_size=batch_size)`` when it takes that parameter and ``batch_size`` is
    given, else ``factory()``.

    Raises:
        ConfigurationError: the spec is malformed, the module cannot be imported (it does
            not exist, or importing it raised), it has no such callable, or the factory
            raised (any exception, or a ``SystemExit`` from ``sys.exit()``, named in one
            line; ampkit's own errors pass through, and so does ``KeyboardInterrupt``).
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        from ampkit.models.library import HF_CHECKPOINTS

        known = [*BUILTIN_MODELS, *(f"hf:{name}" for name in HF_CHECKPOINTS)]
        guess = [k for k in known if k.endswith(f":{spec}")][:1] or difflib.get_close_matches(
            spec, known, n=1
        )
        hint = f" Did you mean {guess[0]!r}?" if guess else ""
        raise model_error(f"{spec!r} is not a model.{hint} Use {_FORMS}.")
    module = _import_module(spec, module_name)
    factory: Any = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            names = [n for n in vars(module) if not n.startswith("_") and callable(vars(module)[n])]
            guess = difflib.get_close_matches(part, names, n=1)
            hint = f" Did you mean {guess[0]!r}?" if guess else ""
            raise model_error(
                f"module {module_name!r} has no function {attr!r}.{hint} Name a "
                "function in it, as package.module:factory."
            )
        factory = getattr(factory, part)
    if not callable(factory):
        raise model_error(f"{spec} is not callable. Name a factory function.")
    kwargs: dict[str, int] = {}
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: no factory is one
        signature = None
    if batch_size is not None and signature is not None and "batch_size" in signature.parameters:
        kwargs["batch_size"] = batch_size
    takes = f"only {', '.join(kwargs)}" if kwargs else "no arguments"
    problem = (
        f"{spec} is not a model factory: it cannot be called with {takes} ({{}}). "
        f"Name a function that takes {takes} and returns a model ({_FORMS})."
    )
    if signature is not None:
        try:
            signature.bind(**kwargs)
        except TypeError as exc:  # a class such as torch.nn:Linear, or json:loads
            raise model_error(problem.format(exc)) from None
    return _run_factory(spec, factory, kwargs, problem if signature is None else None)


def _run_factory(spec: str, factory: Any, kwargs: dict[str, int], unbindable: str | None) -> Any:
    """``factory(**kwargs)``, with whatever it raises as one line naming it.

    ``unbindable``: the message for a ``TypeError`` of a factory whose signature could not be
    read (the call itself is then the only test that it takes these arguments).
    """
    try:
        return factory(**kwargs)
    except (KeyboardInterrupt, AmpkitError):
        raise  # Ctrl-C is the user's; ampkit's own errors are already one line
    except SystemExit as exc:
        raise model_error(
            f"the factory {spec} raised {_raised(exc)} (it called sys.exit() or "
            "exit()) instead of returning a model. Return the model from it; keep the "
            "script's own command line under `if __name__ == '__main__':`."
        ) from None
    except BaseException as exc:
        if unbindable is not None and isinstance(exc, TypeError):
            raise model_error(unbindable.format(exc)) from None
        raise model_error(
            f"the factory {spec} raised {_raised(exc)}. Fix the factory (call it in Python "
            "to see the traceback), then run the command again."
        ) from None


def _raised(exc: BaseException) -> str:
    """``SystemExit(0)``, ``ValueError: first line ...``: an exception in one line."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r})"
    lines = str(exc).strip().splitlines()
    said = f": {lines[0]}{' ...' if len(lines) > 1 else ''}" if lines else ""
    return f"{type(exc).__name__}{said}"


def _describe(made: object) -> str:
    if isinstance(made, tuple):
        return f"a tuple of {len(made)} items ({', '.join(type(m).__name__ for m in made)})"
    return type(made).__name__


def is_closure_form(made: object) -> bool:
    """Whether a factory returned ``(model, closure)``: the form only ``ampkit doctor`` runs
    (a closure runs one fixed model, so no copy can be trained on it)."""
    return (
        isinstance(made, tuple)
        and len(made) == 2
        and isinstance(made[0], nn.Module)
        and callable(made[1])
        and not isinstance(made[1], nn.Module)
    )


def from_factory_result(spec: str, made: object) -> BuiltModel:
    """A :class:`BuiltModel` from what a factory returned (see the module docstring).

    Raises:
        ConfigurationError: not a BuiltModel, ``(model, batch)`` or ``(model, inputs,
            targets)`` with a ``torch.nn.Module`` first; ``(model, closure)``, which only
            the doctor can use; or a model or batch on the ``meta`` device (no data).
    """
    if isinstance(made, BuiltModel):
        refuse_meta(spec, made.model, made.example_batch)
        return made
    if not isinstance(made, tuple) or len(made) not in (2, 3) or not isinstance(made[0], nn.Module):
        raise model_error(
            f"{spec} returned {_describe(made)}. Return (model, batch), "
            "(model, inputs, targets) or an ampkit.models.resolve.BuiltModel, with a "
            "torch.nn.Module as the model."
        )
    model = made[0]
    if not is_closure_form(made):
        refuse_meta(spec, model, made[1:])
    params = sum(p.numel() for p in model.parameters())
    description = f"{type(model).__name__} from {spec}, {params:,} parameters"
    if len(made) == 2:
        batch = made[1]
        if is_closure_form(made):
            raise model_error(
                f"{spec} returned (model, closure); a closure runs one fixed model, "
                "so only `ampkit doctor` can use it. Return (model, batch) or (model, inputs, "
                "targets) instead."
            )
        samples = batch_size_of(batch)
        return BuiltModel(
            name=spec,
            model=model,
            batch=lambda step: batch,
            items_per_step=samples,
            batch_size=samples,
            description=description,
        )
    inputs, targets = made[1], made[2]
    if not isinstance(targets, torch.Tensor) or next(iter_tensors(inputs), None) is None:
        raise model_error(
            f"{spec} must return tensors (or a dict of tensors) as inputs and a "
            "tensor as targets in (model, inputs, targets)."
        )
    samples = batch_size_of(inputs)
    return BuiltModel(
        name=spec,
        model=model,
        batch=lambda step: (inputs, targets),
        loss_fn=logits_loss,
        items_per_step=samples,
        batch_size=samples,
        description=description,
    )


def build_model(
    spec: str, *, batch_size: int | None = None, seed: int = 0, allow_large: bool = False
) -> BuiltModel:
    """Resolve a ``--model`` string (see the module docstring) into a :class:`BuiltModel`.

    Args:
        spec: ``gpt``, ``convnet``, ``hf:<name>[:options]``, ``timm:<name>[:options]`` or
            ``package.module:factory``.
        batch_size: samples per batch; None takes the model's default (gpt 16, convnet 32,
            library models 8; a factory's own default).
        seed: seeds the random weights and batches of built-in and library models.
        allow_large: build an ``hf:`` model whose options ask for more than the size limit
            of :mod:`ampkit.models.size` (``--allow-large``).

    Raises:
        ConfigurationError: an unknown name or option, an unimportable module, a missing
            factory, a factory that returns something unusable, or an ``hf:`` model estimated
            above the size limit (unless ``allow_large``).
        MissingDependencyError: ``hf:`` without transformers, ``timm:`` without timm.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise model_error(f"{spec!r} is not a model. Use {_FORMS}.")
    spec = spec.strip()
    if batch_size is not None and not is_int(batch_size, 1):
        raise ConfigurationError(
            f"batch_size: {batch_size!r} is invalid. Use an integer >= 1.", argument="batch_size"
        )
    if spec in BUILTINS:
        return BUILTINS[spec](batch_size=batch_size, seed=seed)
    prefix, _, rest = spec.partition(":")
    if prefix in _LIBRARIES:
        from ampkit.models.library import build_hf, build_timm

        name, _, options = rest.partition(":")
        if not name:
            raise model_error(
                f"{spec!r} names no model. Write {prefix}:<name>, e.g. "
                f"{'hf:gpt2' if prefix == 'hf' else 'timm:resnet18'}."
            )
        if prefix == "timm":
            return build_timm(spec, name, options, batch_size=batch_size, seed=seed)
        return build_hf(
            spec, name, options, batch_size=batch_size, seed=seed, allow_large=allow_large
        )
    return from_factory_result(spec, call_factory(spec, batch_size))
