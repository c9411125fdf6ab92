"""``--model`` strings: one resolver for ``ampkit bench``, ``ampkit doctor`` (and later tools).

:func:`build_model` turns a string into a :class:`BuiltModel`: a model, a deterministic batch
for every step, and how the batch becomes a loss (the batch convention of
:mod:`ampkit.precision.batches`, so ``Trainer(built.model, ..., loss_fn=built.loss_fn)`` trains it on
``built.batch``). Accepted strings:

* ``gpt``: the built-in GPT on the standard-library byte corpus;
* ``convnet``: a small image classifier on random labelled images;
* ``hf:<name>[:options]``: a Hugging Face ``transformers`` model built from the library's config
  with random weights (``hf:gpt2``, ``hf:bert-base-uncased``, ``hf:t5-small:tiny``; see
  :mod:`ampkit.models.library`), needs ``pip install 'ampkit[hf]'``;
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
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ampkit._tree import iter_tensors
from ampkit.errors import ConfigurationError
from ampkit.precision.batches import batch_loss, batch_size_of

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
    "logits_loss",
]

#: The model names that need no import.
BUILTIN_MODELS = ("gpt", "convnet")

_FORMS = (
    "gpt, convnet, hf:<name> (e.g. hf:gpt2), timm:<name>, or package.module:factory (a "
    "function returning (model, batch), (model, inputs, targets) or an "
    "ampkit.models.resolve.BuiltModel)"
)


def call_model(model: nn.Module | Callable[..., Any], inputs: Any) -> Any:
    """``model(**inputs)`` for a dict, ``model(*inputs)`` for a tuple or list, else
    ``model(inputs)``: how Hugging Face models and plain modules take their inputs."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def _logits(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    found = output.get("logits") if isinstance(output, dict) else getattr(output, "logits", None)
    if isinstance(found, torch.Tensor):
        return found
    for tensor in iter_tensors(output):
        if tensor.is_floating_point() and tensor.dim() > 0:
            return tensor
    raise ConfigurationError(
        f"--model: the model returned {type(output).__name__}, which holds no logits. Return "
        "a tensor, an object or dict with 'logits', or compute the loss in the model and "
        "return (model, batch) from the factory."
    )


def logits_loss(output: Any, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the output's logits for integer targets (sequence outputs flattened,
    ``-100`` ignored), mean squared error for float targets.

    Raises:
        ConfigurationError: the output holds no logits tensor.
    """
    logits = _logits(output)
    if targets.is_floating_point():
        return F.mse_loss(logits.float(), targets)
    if logits.dim() == targets.dim() + 1 and logits.dim() > 2:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return F.cross_entropy(logits, targets)


@dataclass(frozen=True, kw_only=True)
class BuiltModel:
    """A model, a batch for every step, and how a batch becomes the loss.

    Attributes:
        name: the spec it was built from (``hf:gpt2``, ``mypkg.models:build``).
        model: the model, in fp32 on the CPU. Tools that train copies deep-copy it.
        batch: ``batch(step)`` -> the batch of that step on the CPU (the same batch for the
            same step). A tuple ``(inputs, targets)`` when ``loss_fn`` is set; otherwise what
            the model consumes (a dict of tensors for Hugging Face models).
        loss_fn: ``loss_fn(outputs, targets)``, as ``Trainer(loss_fn=...)``; None when the
            model returns its loss.
        items_per_step: samples (or tokens) in one batch, for throughput.
        unit: what ``items_per_step`` counts: ``"samples"`` or ``"tokens"``.
        batch_size: samples in one batch.
        description: one line on the model's shape.
        flops_per_step: model FLOPs of one training step when known in closed form.
    """

    name: str
    model: nn.Module
    batch: Callable[[int], Any]
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None
    items_per_step: int
    unit: str = "samples"
    batch_size: int
    description: str = ""
    flops_per_step: float | None = None

    @property
    def example_batch(self) -> Any:
        """The batch of step 0 (an input example, e.g. for tracing or export)."""
        return self.batch(0)

    @property
    def tokens_per_sample(self) -> int | None:
        """Tokens in one sample when the unit is tokens (for ``Trainer(tokens_per_sample=)``)."""
        return self.items_per_step // self.batch_size if self.unit == "tokens" else None

    def loss(self, model: nn.Module | Callable[..., Any], batch: Any) -> torch.Tensor:
        """The loss of ``batch`` for ``model`` (this model or a copy of it).

        Without ``loss_fn`` this is :func:`ampkit.precision.batches.batch_loss`; with it, the
        batch is ``(inputs, targets)`` and the loss ``loss_fn(call_model(model, inputs),
        targets)`` (dict inputs become keyword arguments).

        Raises:
            ConfigurationError: the batch or the model's output does not fit the convention.
        """
        if self.loss_fn is None:
            return batch_loss(model, batch)  # type: ignore[arg-type]
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise ConfigurationError(
                f"--model: {self.name}: with a loss function each batch must be "
                f"(inputs, targets); got {type(batch).__name__}."
            )
        inputs, targets = batch
        return self.loss_fn(call_model(model, inputs), targets)

    def closure(
        self, model: nn.Module | None = None, device: torch.device | str | None = None
    ) -> Callable[[], torch.Tensor]:
        """A function that runs the forward pass on the next step's batch and returns the
        loss (what :func:`ampkit.diagnose` takes): step 0's batch first, then step 1's, ..."""
        from ampkit._tree import to_device

        target = self.model if model is None else model
        where = torch.device(device) if device is not None else None
        calls = [0]

        def closure() -> torch.Tensor:
            batch = self.batch(calls[0])
            calls[0] += 1
            return self.loss(target, to_device(batch, where) if where is not None else batch)

        return closure


class ConvNet(nn.Module):
    """A small image classifier: three conv-BN-ReLU stages, global pooling, a linear head."""

    def __init__(self, channels: int = 32, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width_in = 3
        for width in (channels, 2 * channels, 4 * channels):
            layers += [
                nn.Conv2d(width_in, width, 3, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            width_in = width
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(width_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.features(x).mean(dim=(2, 3)))
        return out


def gpt_model(
    batch_size: int = 16,
    seq_len: int = 128,
    *,
    n_layer: int = 2,
    n_head: int = 4,
    n_embd: int = 128,
    seed: int = 0,
    corpus_bytes: int = 500_000,
) -> BuiltModel:
    """The built-in GPT (``ampkit train``'s model) on the standard-library byte corpus.

    Batches are ``(inputs, targets)`` next-byte pairs; the model returns ``(logits, loss)``.

    Raises:
        DataError: the built-in corpus cannot be read or is too small for the batch.
    """
    from ampkit.models.corpus import load_corpus
    from ampkit.models.gpt import GPT, GPTConfig

    corpus = load_corpus(max_bytes=max(corpus_bytes, 4 * batch_size * (seq_len + 1)))
    corpus.validate(batch_size, seq_len)
    config = GPTConfig(block_size=seq_len, n_layer=n_layer, n_head=n_head, n_embd=n_embd)
    with torch.random.fork_rng(devices=[]):  # seed the weights without touching the caller's RNG
        torch.manual_seed(seed)
        model = GPT(config)
    params = sum(p.numel() for p in model.parameters())
    return BuiltModel(
        name="gpt",
        model=model,
        batch=lambda step: corpus.batch(step, batch_size, seq_len, seed=seed),
        items_per_step=batch_size * seq_len,
        unit="tokens",
        batch_size=batch_size,
        description=(
            f"built-in GPT, {params:,} parameters ({n_layer} layers, width {n_embd}), "
            f"batch {batch_size} x {seq_len} tokens"
        ),
    )


def convnet_model(batch_size: int = 32, image_size: int = 32, *, seed: int = 0) -> BuiltModel:
    """:class:`ConvNet` on random 3-channel images with a fixed labelling rule per step."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ConvNet()

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
        images = torch.randn(batch_size, 3, image_size, image_size, generator=generator)
        labels = (images[:, 0].mean(dim=(1, 2)) > 0).long() + 2 * (
            images[:, 1].mean(dim=(1, 2)) > 0
        ).long()
        return images, labels

    params = sum(p.numel() for p in model.parameters())
    return BuiltModel(
        name="convnet",
        model=model,
        batch=batch,
        loss_fn=F.cross_entropy,
        items_per_step=batch_size,
        unit="samples",
        batch_size=batch_size,
        description=(
            f"small conv net, {params:,} parameters, "
            f"batch {batch_size} x 3x{image_size}x{image_size}"
        ),
    )


def _import_module(spec: str, module_name: str) -> Any:
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # the user's module exists but imports something missing: show that
        raise ConfigurationError(
            f"--model: cannot import module {module_name!r} (no module named {exc.name!r}). "
            "Run from the folder that holds it, or install its package."
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
            not exist), or it has no such callable.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        from ampkit.models.library import HF_CHECKPOINTS

        known = [*BUILTIN_MODELS, *(f"hf:{name}" for name in HF_CHECKPOINTS)]
        guess = [k for k in known if k.endswith(f":{spec}")][:1] or difflib.get_close_matches(
            spec, known, n=1
        )
        hint = f" Did you mean {guess[0]!r}?" if guess else ""
        raise ConfigurationError(f"--model: {spec!r} is not a model.{hint} Use {_FORMS}.")
    module = _import_module(spec, module_name)
    factory: Any = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            names = [n for n in vars(module) if not n.startswith("_") and callable(vars(module)[n])]
            guess = difflib.get_close_matches(part, names, n=1)
            hint = f" Did you mean {guess[0]!r}?" if guess else ""
            raise ConfigurationError(
                f"--model: module {module_name!r} has no function {attr!r}.{hint} Name a "
                "function in it, as package.module:factory."
            )
        factory = getattr(factory, part)
    if not callable(factory):
        raise ConfigurationError(f"--model: {spec} is not callable. Name a factory function.")
    kwargs: dict[str, int] = {}
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: no factory is one
        signature = None
    if batch_size is not None and signature is not None and "batch_size" in signature.parameters:
        kwargs["batch_size"] = batch_size
    takes = f"only {', '.join(kwargs)}" if kwargs else "no arguments"
    problem = (
        f"--model: {spec} is not a model factory: it cannot be called with {takes} ({{}}). "
        f"Name a function that takes {takes} and returns a model ({_FORMS})."
    )
    try:
        if signature is None:
            return factory(**kwargs)
        signature.bind(**kwargs)
    except TypeError as exc:  # a class such as torch.nn:Linear, or json:loads
        raise ConfigurationError(problem.format(exc)) from None
    return factory(**kwargs)


def _describe(made: object) -> str:
    if isinstance(made, tuple):
        return f"a tuple of {len(made)} items ({', '.join(type(m).__name__ for m in made)})"
    return type(made).__name__


def from_factory_result(spec: str, made: object) -> BuiltModel:
    """A :class:`BuiltModel` from what a factory returned (see the module docstring).

    Raises:
        ConfigurationError: not a BuiltModel, ``(model, batch)`` or ``(model, inputs,
            targets)`` with a ``torch.nn.Module`` first; or ``(model, closure)``, which only
            the doctor can use.
    """
    if isinstance(made, BuiltModel):
        return made
    if not isinstance(made, tuple) or len(made) not in (2, 3) or not isinstance(made[0], nn.Module):
        raise ConfigurationError(
            f"--model: {spec} returned {_describe(made)}. Return (model, batch), "
            "(model, inputs, targets) or an ampkit.models.resolve.BuiltModel, with a "
            "torch.nn.Module as the model."
        )
    model = made[0]
    params = sum(p.numel() for p in model.parameters())
    description = f"{type(model).__name__} from {spec}, {params:,} parameters"
    if len(made) == 2:
        batch = made[1]
        if callable(batch) and not isinstance(batch, nn.Module):
            raise ConfigurationError(
                f"--model: {spec} returned (model, closure); a closure runs one fixed model, "
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
        raise ConfigurationError(
            f"--model: {spec} must return tensors (or a dict of tensors) as inputs and a "
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


def build_model(spec: str, *, batch_size: int | None = None, seed: int = 0) -> BuiltModel:
    """Resolve a ``--model`` string (see the module docstring) into a :class:`BuiltModel`.

    Args:
        spec: ``gpt``, ``convnet``, ``hf:<name>[:options]``, ``timm:<name>[:options]`` or
            ``package.module:factory``.
        batch_size: samples per batch; None takes the model's default (gpt 16, convnet 32,
            library models 8; a factory's own default).
        seed: seeds the random weights and batches of built-in and library models.

    Raises:
        ConfigurationError: an unknown name or option, an unimportable module, a missing
            factory, or a factory that returns something unusable.
        MissingDependencyError: ``hf:`` without transformers, ``timm:`` without timm.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigurationError(f"--model: {spec!r} is not a model. Use {_FORMS}.")
    spec = spec.strip()
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ConfigurationError(f"--batch-size: {batch_size!r} is invalid. Use an integer >= 1.")
    if spec == "gpt":
        return gpt_model(seed=seed) if batch_size is None else gpt_model(batch_size, seed=seed)
    if spec == "convnet":
        return (
            convnet_model(seed=seed) if batch_size is None else convnet_model(batch_size, seed=seed)
        )
    prefix, _, rest = spec.partition(":")
    if prefix in ("hf", "timm"):
        from ampkit.models.library import build_hf, build_timm

        name, _, options = rest.partition(":")
        if not name:
            raise ConfigurationError(
                f"--model: {spec!r} names no model. Write {prefix}:<name>, e.g. "
                f"{'hf:gpt2' if prefix == 'hf' else 'timm:resnet18'}."
            )
        build = build_hf if prefix == "hf" else build_timm
        made = build(spec, name, options, batch_size=batch_size, seed=seed)
        # every LibraryModel field is a BuiltModel field (shallow: the model is not copied)
        return BuiltModel(name=spec, **{f.name: getattr(made, f.name) for f in fields(made)})
    return from_factory_result(spec, call_factory(spec, batch_size))
