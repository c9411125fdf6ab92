"""The heads ``hf:`` builds, by task: one registered :class:`HfTask` per kind in
:data:`HF_TASKS` (which config gets it, its ``transformers`` auto class, its example batch and
how its loss is asked for).

A config gets the first task, in :data:`HF_TASKS` order, whose auto mapping lists the config's
model type and whose ``applies`` accepts it: speech seq2seq (Whisper) before seq2seq LM
before contrastive two-tower (CLIP, SigLIP) before multimodal (refused) before masked LM before
causal LM before image classification. A new kind is one entry here.

Example batches hold what a tokenizer or feature extractor gives: text models get
``input_ids``, a padded ``attention_mask`` (row 0 full, the other rows of random lengths from
half the sequence up, pad positions 0 and holding the pad token; right padding unless the
``padding=left`` option asks otherwise), ``token_type_ids`` where the model takes them and the
config has token types (BERT, RoBERTa, DeBERTa: a second segment in the second half of each
row), and ``labels`` with ``-100`` at pad positions; encoder-decoders also get the
``decoder_input_ids`` the model would derive from the labels. Vision models get ``pixel_values`` of the
config's image size, Whisper ``input_features`` of ``num_mel_bins x 2 * max_source_positions``.
Every batch is seeded by the step.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ampkit.models.built import model_error

__all__ = ["HF_TASKS", "PADDINGS", "BatchShape", "HfTask", "hf_task", "text_config"]

#: What the ``padding`` option accepts.
PADDINGS = ("right", "left", "none")


@dataclass(frozen=True)
class BatchShape:
    """What an example batch is built from.

    Attributes:
        config: the model's config.
        batch_size: rows per batch.
        seq_len: tokens per row (text), target tokens (speech seq2seq).
        takes: the keyword arguments of the model's ``forward``.
        padding: ``right``, ``left`` or ``none`` (every row full).
    """

    config: Any
    batch_size: int
    seq_len: int
    takes: frozenset[str]
    padding: str = "right"


Batch = dict[str, Any]


@dataclass(frozen=True)
class HfTask:
    """One kind of head ``hf:`` builds.

    Attributes:
        name: the kind, as the model description shows it (``causal LM``).
        mapping: the ``transformers.models.auto.modeling_auto`` mapping that lists the model
            types with this head (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``).
        auto_class: the ``transformers`` auto class that builds it (``AutoModelForCausalLM``).
        make_batch: ``make_batch(shape, generator)`` -> the batch; None for a kind that is
            recognised but refused (``refusal`` says why).
        unit: what a step counts: ``tokens`` or ``samples``.
        loss_keys: keys of the batch that only ask for the loss (``labels``,
            ``return_loss``); inference inputs leave them out.
        applies: a further test of the config beyond the mapping.
        refusal: the reason a recognised kind gets no batch.
    """

    name: str
    mapping: str
    auto_class: str
    make_batch: Callable[[BatchShape, torch.Generator], Batch] | None
    unit: str = "tokens"
    loss_keys: tuple[str, ...] = ("labels",)
    applies: Callable[[Any], bool] = lambda config: True
    refusal: str = ""

    def matches(self, config: Any) -> bool:
        """Whether a config gets this head."""
        from transformers.models.auto import modeling_auto

        return config.model_type in getattr(modeling_auto, self.mapping, {}) and self.applies(
            config
        )


def text_config(config: Any) -> Any:
    """The config of the text part: ``text_config`` where the config has one, else itself."""
    inner = getattr(config, "text_config", None)
    return inner if inner is not None else config


def _int(config: Any, key: str, default: int) -> int:
    value = getattr(config, key, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _lengths(shape: BatchShape, generator: torch.Generator, length: int) -> torch.Tensor:
    """Real tokens per row: the first row full, the others from half the length up."""
    rows = shape.batch_size
    if shape.padding == "none" or length < 2:
        return torch.full((rows,), length)
    lengths = torch.randint(max(1, length // 2), length + 1, (rows,), generator=generator)
    lengths[0] = length
    return lengths


def _mask(lengths: torch.Tensor, length: int, left: bool) -> torch.Tensor:
    positions = torch.arange(length).expand(len(lengths), length)
    if left:
        return (positions >= length - lengths[:, None]).long()
    return (positions < lengths[:, None]).long()


def _tokens(config: Any, shape: BatchShape, generator: torch.Generator, length: int) -> Batch:
    """``input_ids`` and ``attention_mask`` (padded), ``token_type_ids`` where taken."""
    vocab = int(config.vocab_size)
    pad = _int(config, "pad_token_id", _int(config, "eos_token_id", 0))
    ids = torch.randint(0, vocab, (shape.batch_size, length), generator=generator)
    ids = torch.where(ids == pad, (ids + 1) % vocab, ids)  # the pad token only where padded
    mask = _mask(_lengths(shape, generator, length), length, shape.padding == "left")
    batch: Batch = {"input_ids": ids.masked_fill(mask == 0, pad)}
    if "attention_mask" in shape.takes:
        batch["attention_mask"] = mask
    types = _int(config, "type_vocab_size", 0)
    if "token_type_ids" in shape.takes and types >= 1:
        segment = torch.zeros_like(ids)
        if types >= 2:  # a sentence pair: the second half of each row's tokens
            real = mask.cumsum(dim=1)
            segment = (real > mask.sum(dim=1, keepdim=True) // 2).long() * mask
        batch["token_type_ids"] = segment
    return batch


def _causal(shape: BatchShape, generator: torch.Generator) -> Batch:
    batch = _tokens(shape.config, shape, generator, shape.seq_len)
    mask = batch.get("attention_mask")
    labels = batch["input_ids"].clone()
    if mask is not None:
        labels = labels.masked_fill(mask == 0, -100)
    return {**batch, "labels": labels}


def _masked(shape: BatchShape, generator: torch.Generator) -> Batch:
    config = shape.config
    batch = _tokens(config, shape, generator, shape.seq_len)
    ids = batch["input_ids"]
    real = batch.get("attention_mask", torch.ones_like(ids)).bool()
    mask_id = _int(config, "mask_token_id", int(config.vocab_size) - 1)
    chosen = (torch.rand(ids.shape, generator=generator) < 0.15) & real
    first = real.long().argmax(dim=1)  # at least one target per row: its first real token
    chosen[torch.arange(len(ids)), first] = True
    return {
        **batch,
        "input_ids": ids.masked_fill(chosen, mask_id),
        "labels": ids.masked_fill(~chosen, -100),
    }


def _targets(config: Any, shape: BatchShape, generator: torch.Generator) -> torch.Tensor:
    """Decoder targets: random ids, right-padded with ``-100``."""
    vocab = int(config.vocab_size)
    labels = torch.randint(0, vocab, (shape.batch_size, shape.seq_len), generator=generator)
    mask = _mask(_lengths(shape, generator, shape.seq_len), shape.seq_len, left=False)
    return labels.masked_fill(mask == 0, -100)


def _decoder_inputs(config: Any, labels: torch.Tensor) -> torch.Tensor:
    """The decoder's inputs for ``labels``: shifted right behind the decoder start token, pad
    where the labels are ``-100`` (what BART, T5 and Whisper derive from labels themselves,
    and what a seq2seq collator gives; inference and export need them)."""
    start = _int(config, "decoder_start_token_id", 0)
    pad = _int(config, "pad_token_id", 0)
    inputs = torch.cat([torch.full_like(labels[:, :1], start), labels[:, :-1]], dim=1)
    return inputs.masked_fill(inputs == -100, pad)


def _seq2seq(shape: BatchShape, generator: torch.Generator) -> Batch:
    batch = _tokens(shape.config, shape, generator, shape.seq_len)
    labels = _targets(shape.config, shape, generator)
    return {**batch, "decoder_input_ids": _decoder_inputs(shape.config, labels), "labels": labels}


def _speech(shape: BatchShape, generator: torch.Generator) -> Batch:
    config = shape.config
    frames = 2 * int(config.max_source_positions)  # Whisper's two convolutions halve it once
    features = torch.randn(shape.batch_size, int(config.num_mel_bins), frames, generator=generator)
    labels = _targets(config, shape, generator)
    return {
        "input_features": features,
        "decoder_input_ids": _decoder_inputs(config, labels),
        "labels": labels,
    }


def _pixels(config: Any, shape: BatchShape, generator: torch.Generator) -> torch.Tensor:
    size = getattr(config, "image_size", 224)
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    channels = _int(config, "num_channels", 3)
    return torch.randn(shape.batch_size, channels, height, width, generator=generator)


def _image(shape: BatchShape, generator: torch.Generator) -> Batch:
    config = shape.config
    labels = torch.randint(0, int(config.num_labels), (shape.batch_size,), generator=generator)
    return {"pixel_values": _pixels(config, shape, generator), "labels": labels}


def _contrastive(shape: BatchShape, generator: torch.Generator) -> Batch:
    text = shape.config.text_config
    batch = _tokens(text, shape, generator, shape.seq_len)
    eos = _int(text, "eos_token_id", -1)
    if 0 <= eos < int(text.vocab_size):  # the text tower pools at each row's end token
        ids, mask = (
            batch["input_ids"],
            batch.get("attention_mask", torch.ones_like(batch["input_ids"])),
        )
        last = (
            mask.sum(dim=1) - 1
            if shape.padding != "left"
            else torch.full((len(ids),), ids.shape[1] - 1)
        )
        ids = torch.where(ids == eos, (ids + 1) % int(text.vocab_size), ids)
        ids[torch.arange(len(ids)), last] = eos
        batch["input_ids"] = ids
    pixels = _pixels(shape.config.vision_config, shape, generator)
    return {**batch, "pixel_values": pixels, "return_loss": True}


def _two_towers(config: Any) -> bool:
    return getattr(config, "text_config", None) is not None and (
        getattr(config, "vision_config", None) is not None
    )


def _multimodal(config: Any) -> bool:
    return any("vision" in key or "audio" in key for key in vars(config) if key.endswith("_config"))


def _whisper_like(config: Any) -> bool:
    return hasattr(config, "num_mel_bins") and hasattr(config, "max_source_positions")


#: The heads ``hf:`` builds, in the order a config is matched against them.
HF_TASKS: tuple[HfTask, ...] = (
    HfTask(
        "speech seq2seq",
        "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
        "AutoModelForSpeechSeq2Seq",
        _speech,
        unit="samples",
        applies=_whisper_like,
    ),
    HfTask(
        "seq2seq LM",
        "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
        "AutoModelForSeq2SeqLM",
        _seq2seq,
        applies=lambda config: bool(getattr(config, "is_encoder_decoder", False)),
    ),
    HfTask(
        "contrastive two-tower",
        "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",
        "AutoModel",
        _contrastive,
        unit="samples",
        loss_keys=("return_loss",),
        applies=_two_towers,
    ),
    HfTask(
        "multimodal LM",
        "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
        "AutoModelForImageTextToText",
        None,
        applies=_multimodal,
        refusal=(
            "its batches need image (or audio) tokens placed in the text to match the "
            "vision tower, which ampkit does not build"
        ),
    ),
    HfTask(
        "masked LM",
        "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
        "AutoModelForMaskedLM",
        _masked,
        applies=lambda config: not getattr(config, "is_encoder_decoder", False),
    ),
    HfTask("causal LM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM", _causal),
    HfTask(
        "image classification",
        "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
        "AutoModelForImageClassification",
        _image,
        unit="samples",
    ),
)


def _supported() -> str:
    return ", ".join(t.name for t in HF_TASKS if t.make_batch is not None)


def hf_task(config: Any, spec: str) -> HfTask:
    """The task ``config`` gets (see the module docstring).

    Raises:
        ConfigurationError: the config gets no task, or a refused one (multimodal); the
            message names the kinds ampkit builds and, where the config holds one, the text
            model to use instead.
    """
    for task in HF_TASKS:
        if task.matches(config):
            if task.make_batch is not None:
                return task
            inner = getattr(getattr(config, "text_config", None), "model_type", None)
            hint = f" For its text model alone use hf:{inner}:tiny." if inner else ""
            raise model_error(
                f"{spec!r}: {config.model_type} is a {task.name} and {task.refusal}. ampkit "
                f"builds {_supported()} heads.{hint} Or pass your own package.module:factory."
            )
    raise model_error(
        f"{spec!r}: the {config.model_type} architecture has none of the heads ampkit builds "
        f"batches for ({_supported()}). Pass your own package.module:factory returning "
        "(model, batch)."
    )


def forward_arguments(model: torch.nn.Module) -> frozenset[str]:
    """The keyword arguments of ``model.forward``."""
    return frozenset(inspect.signature(model.forward).parameters)
