"""Models from the libraries users bring, built from configs with random weights (no network).

``hf:<name>`` builds a Hugging Face ``transformers`` model from the library's own config for
``name`` (a checkpoint name such as ``gpt2``, ``bert-base-uncased``, ``t5-small``, or any model
type ``transformers`` knows, such as ``llama``), with the head that trains on token ids: a causal
LM for decoders, a masked LM for encoders, a seq2seq LM for encoder-decoders. ``timm:<name>``
builds ``timm.create_model(name, pretrained=False)``. Nothing is downloaded: weights are random
(seeded), configs come from the installed library's defaults.

Options after a second colon, comma-separated, change the config: ``hf:gpt2:tiny`` (2 layers,
width 64, vocabulary 512), ``hf:gpt2:n_layer=4,n_embd=256``, ``hf:t5-small:tiny,seq_len=32``
(``seq_len`` sets the batch's sequence length, not the config). For ``timm:`` options are
keyword arguments of ``timm.create_model`` (``timm:vit_tiny_patch16_224:img_size=64``).

The resolver that turns a ``--model`` string into a model is :mod:`ampkit.models.resolve`; this
module only builds the two libraries' models and their batches.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

import torch
import torch.nn.functional as F

from ampkit._logging import quiet_loggers
from ampkit.errors import MissingDependencyError
from ampkit.models.built import BuiltModel, model_error

__all__ = ["HF_CHECKPOINTS", "TINY", "build_hf", "build_timm", "parse_options"]

#: Checkpoint names ``hf:`` knows, as ``(model type, changes to that type's default config)``:
#: the library's default config of a type is its reference checkpoint (``GPT2Config()`` is
#: gpt2, ``BertConfig()`` bert-base-uncased, ``T5Config()`` t5-small).
HF_CHECKPOINTS: dict[str, tuple[str, dict[str, Any]]] = {
    "gpt2": ("gpt2", {}),
    "distilgpt2": ("gpt2", {"n_layer": 6}),
    "gpt2-medium": ("gpt2", {"n_layer": 24, "n_embd": 1024, "n_head": 16}),
    "bert-base-uncased": ("bert", {}),
    "bert-base-cased": ("bert", {"vocab_size": 28996}),
    "bert-large-uncased": (
        "bert",
        {
            "num_hidden_layers": 24,
            "hidden_size": 1024,
            "num_attention_heads": 16,
            "intermediate_size": 4096,
        },
    ),
    "distilbert-base-uncased": ("distilbert", {}),
    "roberta-base": (
        "roberta",
        {"vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1},
    ),
    "t5-small": ("t5", {}),
    "t5-base": ("t5", {"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12}),
}

#: What ``:tiny`` sets (each only where the config has the attribute): 2 layers, width 64,
#: 2 heads, a 512-token vocabulary. Small enough for CPU tests and smoke runs.
TINY: dict[str, int] = {
    "num_hidden_layers": 2,
    "num_decoder_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "d_ff": 128,
    "d_kv": 32,
    "head_dim": 32,
    "vocab_size": 512,
}

_SPECIAL_IDS = (
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "cls_token_id",
    "mask_token_id",
    "decoder_start_token_id",
)


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


def _hf_config(spec: str, name: str, tiny: bool, overrides: dict[str, Any]) -> Any:
    transformers = _import("transformers", "hf")
    model_type, preset = HF_CHECKPOINTS.get(name, (name, {}))
    try:
        config = transformers.AutoConfig.for_model(model_type)
    except ValueError:
        known = list(HF_CHECKPOINTS)
        guess = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {guess[0]!r}?" if guess else ""
        raise model_error(
            f"{spec!r}: {name!r} is neither a checkpoint name ampkit knows nor a "
            f"transformers model type.{hint} Known names: {', '.join(known)}; or any model "
            "type of the installed transformers (llama, mistral, ...). For other models pass "
            "package.module:factory."
        ) from None
    for key in overrides:
        if not hasattr(config, key):
            names = [k for k in config.to_dict() if not k.startswith("_")]
            guess = difflib.get_close_matches(key, names, n=1)
            hint = f" Did you mean {guess[0]!r}?" if guess else ""
            raise model_error(
                f"{spec!r}: {type(config).__name__} has no setting {key!r}.{hint} "
                "Options are the config's own attribute names (or tiny, seq_len)."
            )
    tiny_changes = {k: v for k, v in TINY.items() if hasattr(config, k)} if tiny else {}
    for key, value in {**preset, **tiny_changes, **overrides}.items():
        setattr(config, key, value)
    vocab = int(config.vocab_size)
    for key in _SPECIAL_IDS:
        current = getattr(config, key, None)
        if isinstance(current, int) and current >= vocab:
            setattr(config, key, vocab - 1)
    if (
        getattr(config, "is_encoder_decoder", False)
        and getattr(config, "decoder_start_token_id", None) is None
    ):
        config.decoder_start_token_id = getattr(config, "pad_token_id", None) or 0
    return transformers, config


def _hf_head(transformers: Any, config: Any, spec: str) -> tuple[str, Any]:
    from transformers.models.auto import modeling_auto as auto

    model_type = config.model_type
    if (
        config.is_encoder_decoder
        and model_type in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
    ):
        return "seq2seq", transformers.AutoModelForSeq2SeqLM
    if model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "masked", transformers.AutoModelForMaskedLM
    if model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "causal", transformers.AutoModelForCausalLM
    raise model_error(
        f"{spec!r}: the {model_type} architecture has no causal, masked or seq2seq "
        "language-model head, the heads ampkit builds batches for. Pass your own "
        "package.module:factory returning (model, batch)."
    )


def build_hf(
    spec: str, name: str, options: str, *, batch_size: int | None, seed: int
) -> BuiltModel:
    """A Hugging Face model for ``hf:<name>[:options]`` and a batch of token ids for it.

    Batches hold ``input_ids`` and ``labels`` (the model computes its loss): the ids
    themselves for a causal LM, 15% of positions replaced by the mask token for a masked LM
    (labels ``-100`` elsewhere), random target ids for a seq2seq LM.

    Raises:
        MissingDependencyError: transformers is not installed.
        ConfigurationError: an unknown name or option, or an architecture without an LM head.
    """
    tiny, values = parse_options(spec, options)
    seq_len = values.pop("seq_len", None)
    transformers, config = _hf_config(spec, name, tiny, values)
    task, auto_class = _hf_head(transformers, config, spec)
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if seq_len is None:
        seq_len = min(64 if tiny else 128, limit or 128)
    if not isinstance(seq_len, int) or seq_len < 2 or (limit and seq_len > limit):
        raise model_error(
            f"{spec!r}: seq_len={seq_len!r} is invalid; use an integer from 2 to "
            f"{limit or 'the model limit'}."
        )
    batch_size = batch_size or 8
    with torch.random.fork_rng(devices=[]), quiet_loggers():  # transformers may import torchao
        torch.manual_seed(seed)
        model = auto_class.from_config(config)
    model.train()
    vocab = int(config.vocab_size)
    mask_id = getattr(config, "mask_token_id", None)
    mask_id = mask_id if isinstance(mask_id, int) else vocab - 1

    def batch(step: int) -> dict[str, torch.Tensor]:
        generator = _random_generator(seed, step)
        ids = torch.randint(0, vocab, (batch_size, seq_len), generator=generator)
        if task == "causal":
            return {"input_ids": ids, "labels": ids.clone()}
        if task == "seq2seq":
            labels = torch.randint(0, vocab, (batch_size, seq_len), generator=generator)
            return {"input_ids": ids, "labels": labels}
        masked = torch.rand(batch_size, seq_len, generator=generator) < 0.15
        masked[:, 0] = True  # at least one target per row
        return {
            "input_ids": ids.masked_fill(masked, mask_id),
            "labels": ids.masked_fill(~masked, -100),
        }

    params = sum(p.numel() for p in model.parameters())
    return BuiltModel(
        name=spec,
        model=model,
        batch=batch,
        loss_fn=None,
        items_per_step=batch_size * seq_len,
        unit="tokens",
        batch_size=batch_size,
        description=(
            f"Hugging Face {type(model).__name__} ({name}{' tiny' if tiny else ''} config, "
            f"random weights), {params:,} parameters, batch {batch_size} x {seq_len} tokens"
        ),
        config=config,
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
