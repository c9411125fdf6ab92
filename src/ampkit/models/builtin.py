"""The built-in models, registered in one place: :data:`BUILTINS` maps a ``--model`` name to
its builder.

A new built-in is one builder here, decorated with :func:`builtin`; ``build_model`` and every
command pick it up from the registry. A builder takes ``batch_size`` and ``seed`` keywords
(``batch_size=None``: its own default) and returns a :class:`~ampkit.models.built.BuiltModel`.

``gpt`` is the same model in every command (``ampkit train``, ``bench``, ``doctor``,
``export``): :data:`GPT_DEFAULTS`, which are :class:`~ampkit.models.gpt.GPTConfig`'s defaults
and ``ampkit train``'s (2 layers, 4 heads, width 128, context 128 bytes, 16 sequences per
batch), seeded weights. A command's own options may change it (``--batch-size``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ampkit.models.built import BuiltModel
from ampkit.models.gpt import GPT, GPTConfig, train_flops

__all__ = [
    "BUILTINS",
    "GPT_DEFAULTS",
    "Builder",
    "ConvNet",
    "builtin",
    "convnet_model",
    "gpt_model",
]

Builder = Callable[..., BuiltModel]

#: ``--model`` name -> builder, filled by :func:`builtin` in this module.
BUILTINS: dict[str, Builder] = {}

_GPT_CONFIG = GPTConfig()

#: The built-in GPT of every command: its shape (``GPTConfig()``) and batch.
GPT_DEFAULTS: dict[str, int] = {
    "batch_size": 16,
    "seq_len": _GPT_CONFIG.block_size,
    "n_layer": _GPT_CONFIG.n_layer,
    "n_head": _GPT_CONFIG.n_head,
    "n_embd": _GPT_CONFIG.n_embd,
    "corpus_bytes": 500_000,
}


def builtin(name: str) -> Callable[[Builder], Builder]:
    """Register a builder under ``name`` (names must be unique)."""

    def register(builder: Builder) -> Builder:
        if name in BUILTINS:
            raise ValueError(f"duplicate built-in model {name!r}")
        BUILTINS[name] = builder
        return builder

    return register


@builtin("gpt")
def gpt_model(
    batch_size: int | None = None,
    seq_len: int = GPT_DEFAULTS["seq_len"],
    *,
    n_layer: int = GPT_DEFAULTS["n_layer"],
    n_head: int = GPT_DEFAULTS["n_head"],
    n_embd: int = GPT_DEFAULTS["n_embd"],
    seed: int = 0,
    corpus_bytes: int = GPT_DEFAULTS["corpus_bytes"],
) -> BuiltModel:
    """The built-in GPT (``ampkit train``'s model) on the standard-library byte corpus.

    Batches are ``(inputs, targets)`` next-byte pairs; the model returns ``(logits, loss)``.
    Trained with AdamW (lr 1e-3, weight decay 0.1); FLOPs in closed form
    (:func:`~ampkit.models.gpt.train_flops`). ``batch_size=None`` is 16.

    Raises:
        DataError: the built-in corpus cannot be read or is too small for the batch.
        ConfigurationError: a shape :class:`~ampkit.models.gpt.GPTConfig` refuses.
    """
    from ampkit.models.corpus import load_corpus

    batch_size = GPT_DEFAULTS["batch_size"] if batch_size is None else batch_size
    config = GPTConfig(block_size=seq_len, n_layer=n_layer, n_head=n_head, n_embd=n_embd)
    corpus = load_corpus(max_bytes=max(corpus_bytes, 4 * batch_size * (seq_len + 1)))
    corpus.validate(batch_size, seq_len)
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
        flops_per_step=train_flops(model, batch_size, seq_len),
        make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1),
        config=config,
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


@builtin("convnet")
def convnet_model(
    batch_size: int | None = None, image_size: int = 32, *, seed: int = 0
) -> BuiltModel:
    """:class:`ConvNet` on random 3-channel images with a fixed labelling rule per step
    (``batch_size=None`` is 32)."""
    batch_size = 32 if batch_size is None else batch_size
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
