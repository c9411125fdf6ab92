"""What ``ampkit bench`` trains: the built-in GPT, a small conv net, or the user's model.

A :class:`Workload` is a model, a deterministic batch for every step index, a loss and the
unit its throughput is counted in. Every variant of one benchmark trains its own deep copy of
the same initial weights on the same batches, so losses are comparable step by step.

Your own model: ``--model package.module:factory``, where ``factory(batch_size)`` returns a
:class:`Workload`, or a tuple ``(model, inputs, targets)`` trained on that one batch with
cross-entropy (integer targets) or mean squared error (float targets).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ampkit._factory import call_factory
from ampkit.errors import ConfigurationError

__all__ = ["ConvNet", "Workload", "convnet_workload", "gpt_workload", "load_workload"]

Batch = tuple[torch.Tensor, torch.Tensor]


def _default_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


@dataclass
class Workload:
    """One model and its data, as the benchmark needs them.

    Attributes:
        name: shown in the report (``gpt``, ``convnet``, ``mypkg.models:build``).
        model: the model, on the CPU, in fp32; each variant trains a deep copy.
        batch: ``batch(step)`` -> ``(inputs, targets)`` on the CPU, the same for a given step.
        loss: ``loss(model, inputs, targets)`` -> scalar loss tensor.
        items_per_step: samples (or tokens) one step processes, for the throughput column.
        unit: what ``items_per_step`` counts: ``"samples"`` or ``"tokens"``.
        make_optimizer: builds each variant's optimizer (default AdamW, lr 1e-3).
        description: one line on the model's shape, for the report.
        flops_per_step: model FLOPs of one training step (forward + backward) when known in
            closed form; None lets the benchmark count them with ``FlopCounterMode``.
    """

    name: str
    model: nn.Module
    batch: Callable[[int], Batch]
    loss: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
    items_per_step: int
    unit: str = "samples"
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer] = field(default=_default_optimizer)
    description: str = ""
    flops_per_step: float | None = None


def gpt_workload(
    batch_size: int = 16,
    seq_len: int = 128,
    *,
    n_layer: int = 2,
    n_head: int = 4,
    n_embd: int = 128,
    seed: int = 0,
) -> Workload:
    """The built-in GPT (``ampkit train``'s model) on the standard-library byte corpus.

    Raises:
        DataError: the built-in corpus cannot be read.
    """
    from ampkit.bench.flops import gpt_train_flops
    from ampkit.gpt.corpus import load_corpus
    from ampkit.gpt.model import GPT, GPTConfig

    corpus = load_corpus(max_bytes=max(500_000, 4 * batch_size * (seq_len + 1)))
    corpus.validate(batch_size, seq_len)
    config = GPTConfig(block_size=seq_len, n_layer=n_layer, n_head=n_head, n_embd=n_embd)
    with torch.random.fork_rng(devices=[]):  # seed the weights without touching the caller's RNG
        torch.manual_seed(seed)
        model = GPT(config)
    params = sum(p.numel() for p in model.parameters())
    return Workload(
        name="gpt",
        model=model,
        batch=lambda step: corpus.batch(step, batch_size, seq_len, seed=seed),
        loss=lambda m, x, y: m(x, y)[1],
        items_per_step=batch_size * seq_len,
        unit="tokens",
        make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1),
        description=(
            f"built-in GPT, {params:,} parameters ({n_layer} layers, width {n_embd}), "
            f"batch {batch_size} x {seq_len} tokens"
        ),
        flops_per_step=gpt_train_flops(model, batch_size, seq_len),
    )


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


def convnet_workload(batch_size: int = 32, image_size: int = 32, *, seed: int = 0) -> Workload:
    """:class:`ConvNet` on random 3-channel images with a fixed labelling rule per step."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ConvNet()

    def batch(step: int) -> Batch:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
        images = torch.randn(batch_size, 3, image_size, image_size, generator=generator)
        labels = (images[:, 0].mean(dim=(1, 2)) > 0).long() + 2 * (
            images[:, 1].mean(dim=(1, 2)) > 0
        ).long()
        return images, labels

    params = sum(p.numel() for p in model.parameters())
    return Workload(
        name="convnet",
        model=model,
        batch=batch,
        loss=lambda m, x, y: F.cross_entropy(m(x), y),
        items_per_step=batch_size,
        unit="samples",
        description=(
            f"small conv net, {params:,} parameters, "
            f"batch {batch_size} x 3x{image_size}x{image_size}"
        ),
    )


def _from_tuple(spec: str, made: tuple[object, ...]) -> Workload:
    if len(made) != 3:
        raise ConfigurationError(
            f"--model: {spec} returned a tuple of {len(made)} items. Return a Workload or "
            "(model, inputs, targets)."
        )
    model, inputs, targets = made
    if not isinstance(model, nn.Module):
        raise ConfigurationError(
            f"--model: {spec} must return a torch.nn.Module first in (model, inputs, targets)."
        )
    if not isinstance(inputs, torch.Tensor) or not isinstance(targets, torch.Tensor):
        raise ConfigurationError(
            f"--model: {spec} must return tensors as inputs and targets in "
            "(model, inputs, targets)."
        )
    float_targets = targets.is_floating_point()

    def loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if float_targets:
            return F.mse_loss(m(x).float(), y)
        return F.cross_entropy(m(x), y)

    params = sum(p.numel() for p in model.parameters())
    return Workload(
        name=spec,
        model=model,
        batch=lambda step: (inputs, targets),
        loss=loss,
        items_per_step=int(inputs.shape[0]),
        description=f"{type(model).__name__} from {spec}, {params:,} parameters",
    )


def _import_factory(spec: str) -> Callable[..., object]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(
            f"--model: {spec!r} is not a model. Use gpt, convnet, or package.module:factory "
            "(a function returning a Workload or (model, inputs, targets))."
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"--model: cannot import module {module_name!r} ({exc}). Check the name and that "
            "it is importable from the current directory or the installed packages."
        ) from exc
    factory = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise ConfigurationError(
                f"--model: module {module_name!r} has no attribute {attr!r}. Name a function "
                "in it, as package.module:factory."
            )
        factory = getattr(factory, part)
    if not callable(factory):
        raise ConfigurationError(f"--model: {spec} is not callable. Name a factory function.")
    return factory


def load_workload(spec: str, batch_size: int | None = None) -> Workload:
    """Resolve ``--model``: ``gpt``, ``convnet`` or ``package.module:factory``.

    ``batch_size`` (None: the workload's default) is passed to the factory when it takes a
    ``batch_size`` parameter.

    Raises:
        ConfigurationError: unknown name, unimportable module, missing or non-callable
            factory, or a factory that returns something other than a Workload or
            ``(model, inputs, targets)``.
    """
    if spec == "gpt":
        return gpt_workload() if batch_size is None else gpt_workload(batch_size)
    if spec == "convnet":
        return convnet_workload() if batch_size is None else convnet_workload(batch_size)
    factory = _import_factory(spec)
    kwargs: dict[str, int] = {}
    if batch_size is not None:
        try:
            takes_batch = "batch_size" in inspect.signature(factory).parameters
        except (TypeError, ValueError):
            takes_batch = False
        if takes_batch:
            kwargs["batch_size"] = batch_size
    made = call_factory(
        factory, spec, "an ampkit.bench.Workload or (model, inputs, targets)", **kwargs
    )
    if isinstance(made, Workload):
        return made
    if isinstance(made, tuple):
        return _from_tuple(spec, made)
    raise ConfigurationError(
        f"--model: {spec} returned {type(made).__name__}. Return an ampkit.bench.Workload or "
        "(model, inputs, targets)."
    )
