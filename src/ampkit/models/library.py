"""Models from the libraries users bring, built from configs with random weights (no network).

``hf:<name>`` builds a Hugging Face ``transformers`` model from the library's own config for
``name`` (a checkpoint name such as ``gpt2``, ``bert-base-uncased``, ``t5-small``, or any model
type ``transformers`` knows, such as ``llama``, ``vit``, ``whisper``, ``clip``), with the head of
its task (:mod:`ampkit.models.hf_tasks`): a causal LM for decoders, a masked LM for encoders, a
seq2seq LM for encoder-decoders, speech seq2seq for Whisper, contrastive two towers for CLIP,
image classification for ViT, Swin, ConvNeXt; multimodal image-text models are refused in one
line. ``timm:<name>`` builds ``timm.create_model(name, pretrained=False)``. Nothing is
downloaded: weights are random (seeded), configs come from the installed library's defaults.

Options after a second colon, comma-separated, change the config: ``hf:gpt2:tiny`` (every
sub-config shrunk: 2 layers, width 64, 2 heads, 4 experts, vocabulary 512, 32x32 images; see
:mod:`ampkit.models.hf_config`), ``hf:gpt2:n_layer=4,n_embd=256``,
``hf:t5-small:tiny,seq_len=32`` (``seq_len`` sets the batch's sequence length and
``padding=right|left|none`` where the padded rows' pad tokens go, not the config). For ``timm:``
options are keyword arguments of ``timm.create_model`` (``timm:vit_tiny_patch16_224:img_size=64``).

The resolver that turns a ``--model`` string into a model is :mod:`ampkit.models.resolve`; this
module only builds the two libraries' models and their batches.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F

from ampkit._logging import quiet_loggers
from ampkit.errors import MissingDependencyError
from ampkit.models.built import BuiltModel, model_error
from ampkit.models.hf_config import HF_CHECKPOINTS, TINY, hf_config
from ampkit.models.hf_tasks import (
    PADDINGS,
    BatchShape,
    HfTask,
    forward_arguments,
    hf_task,
    text_config,
)

__all__ = ["HF_CHECKPOINTS", "TINY", "build_hf", "build_timm", "parse_options"]


def _import(package: str, extra: str) -> Any:
    try:
        with quiet_loggers():
            return importlib.import_module(package)
    except ImportError as exc:
        raise MissingDependencyError(
            f"model: {extra}: models need the {package!r} package, which cannot be imported "
            f"here ({exc}). Install it: pip install 'ampkit[{extra}]'.",
            argument="model",
        ) from None


def _value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_options(spec: str, text: str) -> tuple[bool, dict[str, Any]]:
    """``(tiny, {key: value})`` from ``tiny,key=value,...`` (values parsed as int/float/bool).

    Raises:
        ConfigurationError: an option is neither ``tiny`` nor ``key=value``.
    """
    tiny, values = False, {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item == "tiny":
            tiny = True
            continue
        key, sep, raw = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise model_error(
                f"{spec!r} has the option {item!r}. Options are 'tiny' or "
                "key=value pairs separated by commas, e.g. hf:gpt2:tiny,n_layer=4."
            )
        values[key.strip()] = _value(raw.strip())
    return tiny, values


def _random_generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def _seq_limit(task: HfTask, config: Any) -> int | None:
    """The longest sequence the model takes (None: no fixed limit, e.g. T5)."""
    if task.name == "speech seq2seq":
        keys: tuple[str, ...] = ("max_target_positions",)
    else:
        keys = ("max_position_embeddings", "n_positions")
    inner = text_config(config)
    for key in keys:
        value = getattr(inner, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _pretrained(spec: str, auto_class: Any, folder: Path) -> Any:
    """``auto_class.from_pretrained(folder)`` (a config or a model), refusals in one line."""
    try:
        with quiet_loggers():
            return auto_class.from_pretrained(folder)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        raise model_error(
            f"{spec!r}: transformers could not load {auto_class.__name__} from {folder}: "
            f"{lines[0]}. Pass a folder written by save_pretrained."
        ) from None


def _local_tokenizer(spec: str, transformers: Any, folder: Path) -> Any:
    """The folder's tokenizer, or None when it holds none."""
    if not any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        return None
    return _pretrained(spec, transformers.AutoTokenizer, folder)


def _build(spec: str, auto_class: Any, config: Any) -> Any:
    try:
        return auto_class.from_config(config)
    except (ValueError, TypeError, AttributeError, KeyError, RuntimeError) as exc:
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        raise model_error(
            f"{spec!r}: transformers could not build {auto_class.__name__} from the "
            f"{type(config).__name__}: {lines[0]}. Change the options so the config is "
            "consistent."
        ) from None


def build_hf(
    spec: str,
    name: str,
    options: str,
    *,
    batch_size: int | None,
    seed: int,
    allow_large: bool = False,
) -> BuiltModel:
    """A Hugging Face model for ``hf:<name>[:options]`` with the head of its task
    (:data:`~ampkit.models.hf_tasks.HF_TASKS`) and an example batch per step.

    Batches hold what a tokenizer or feature extractor gives (see
    :mod:`ampkit.models.hf_tasks`) and what the model needs to compute its loss: ``labels``
    (``-100`` at pad positions; a causal LM's are its ids, a masked LM's the 15% of positions
    replaced by the mask token), ``return_loss=True`` for a contrastive model. Options besides
    the config's attributes: ``tiny``, ``seq_len=N`` and ``padding=right|left|none``.

    Raises:
        MissingDependencyError: transformers is not installed.
        ConfigurationError: an unknown name or option, an architecture without a head ampkit
            builds (a multimodal one among them), settings transformers refuses, or a model
            estimated above the size limit (unless ``allow_large``; :mod:`ampkit.models.size`).
    """
    tiny, values = parse_options(spec, options)
    seq_len = values.pop("seq_len", None)
    padding = values.pop("padding", "right")
    if padding not in PADDINGS:
        raise model_error(
            f"{spec!r}: padding={padding!r} is invalid; use one of {', '.join(PADDINGS)}."
        )
    transformers = _import("transformers", "hf")
    folder = Path(name).expanduser()
    local = folder.is_dir()
    if local:
        if tiny or values:
            raise model_error(
                f"{spec!r}: a local folder's config is its own; it takes only the seq_len= and "
                "padding= options. Change the folder's config.json instead."
            )
        config = _pretrained(spec, transformers.AutoConfig, folder)
    else:
        config = hf_config(transformers, spec, name, tiny, values, allow_large=allow_large)
    task = hf_task(config, spec)
    limit = _seq_limit(task, config)
    if seq_len is None:
        seq_len = min(64 if tiny else 128, limit or 128)
    if not isinstance(seq_len, int) or seq_len < 2 or (limit and seq_len > limit):
        raise model_error(
            f"{spec!r}: seq_len={seq_len!r} is invalid; use an integer from 2 to "
            f"{limit or 'the model limit'}."
        )
    batch_size = batch_size or 8
    auto_class = getattr(transformers, task.auto_class)
    with torch.random.fork_rng(devices=[]), quiet_loggers():  # transformers may import torchao
        torch.manual_seed(seed)
        if local:
            model = _pretrained(spec, auto_class, folder)
        else:
            model = _build(spec, auto_class, config)
    tokenizer = _local_tokenizer(spec, transformers, folder) if local else None
    model.train()
    shape = BatchShape(config, batch_size, seq_len, forward_arguments(model), padding)
    make_batch = cast(Callable[[BatchShape, torch.Generator], dict[str, Any]], task.make_batch)

    def batch(step: int) -> dict[str, Any]:
        return make_batch(shape, _random_generator(seed, step))

    params = sum(p.numel() for p in model.parameters())
    example = batch(0)
    if task.unit == "tokens":
        items, what = batch_size * seq_len, f"{batch_size} x {seq_len} tokens"
    else:
        items = batch_size
        what = " + ".join(
            f"{k} {'x'.join(map(str, v.shape))}" for k, v in example.items() if torch.is_tensor(v)
        )
    return BuiltModel(
        name=spec,
        model=model,
        batch=batch,
        loss_fn=None,
        items_per_step=items,
        unit=task.unit,
        batch_size=batch_size,
        description=(
            f"Hugging Face {type(model).__name__} ({task.name}; {name}"
            f"{' tiny' if tiny else ''} config, "
            f"{'its saved weights' if local else 'random weights'}), {params:,} parameters, "
            f"batch {what}"
        ),
        config=config,
        tokenizer=tokenizer,
        loss_keys=task.loss_keys,
    )


def build_timm(
    spec: str, name: str, options: str, *, batch_size: int | None, seed: int
) -> BuiltModel:
    """``timm.create_model(name, pretrained=False, **options)`` and random labelled images
    of its input size, trained with cross-entropy.

    Raises:
        MissingDependencyError: timm (or the torchvision it imports) cannot be imported.
        ConfigurationError: an unknown model name or option.
    """
    timm = _import("timm", "timm")
    tiny, values = parse_options(spec, options)
    if tiny:
        raise model_error(
            f"{spec!r}: 'tiny' applies to hf: models. Pick a small timm model "
            "(resnet18, vit_tiny_patch16_224) and pass keyword options such as img_size=64."
        )
    if not timm.is_model(name):
        guess = difflib.get_close_matches(name, timm.list_models(), n=3)
        hint = f" Close names: {', '.join(guess)}." if guess else ""
        raise model_error(f"{spec!r}: timm has no model {name!r}.{hint} See timm.list_models().")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = timm.create_model(name, pretrained=False, **values)
    model.train()
    size = values.get("img_size")
    channels, height, width = model.pretrained_cfg.get("input_size", (3, 224, 224))
    if isinstance(size, int):
        height = width = size
    classes = int(getattr(model, "num_classes", 1000))
    batch_size = batch_size or 8

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = _random_generator(seed, step)
        images = torch.randn(batch_size, channels, height, width, generator=generator)
        return images, torch.randint(0, classes, (batch_size,), generator=generator)

    params = sum(p.numel() for p in model.parameters())
    return BuiltModel(
        name=spec,
        model=model,
        batch=batch,
        loss_fn=F.cross_entropy,
        items_per_step=batch_size,
        unit="samples",
        batch_size=batch_size,
        description=(
            f"timm {name} (random weights), {params:,} parameters, "
            f"batch {batch_size} x {channels}x{height}x{width}"
        ),
        config=getattr(model, "pretrained_cfg", None),
    )
