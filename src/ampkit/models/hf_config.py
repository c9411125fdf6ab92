"""Hugging Face configs for ``hf:<name>[:options]``: the checkpoint names ampkit knows, and what
``:tiny`` does to a config and every sub-config it holds.

``:tiny`` rebuilds the config through its own constructor (so values the constructor derives,
such as Mamba's ``time_step_rank`` or the per-layer ``layer_types`` of Qwen2 and Gemma 3, follow
the new sizes) with every attribute of :data:`TINY` the config has and can set: read-only
properties (Falcon's ``head_dim``) are skipped. Sub-configs (CLIP's ``text_config`` and
``vision_config``, the towers of a multimodal model) are shrunk the same way, and staged vision
models (Swin, ConvNeXt: a ``depths`` list) get two one-block stages.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

from ampkit._logging import quiet_loggers
from ampkit.models.built import model_error
from ampkit.models.size import check_overrides, check_size

__all__ = ["HF_CHECKPOINTS", "TINY", "TINY_STAGES", "hf_config", "sub_configs"]

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

#: What ``:tiny`` sets, in every (sub-)config that has the attribute and can set it: 2 layers
#: (encoder and decoder alike), width 64, 2 heads of 32 (query, key/value, encoder and
#: decoder heads), feed-forward 128, 4 experts of which 2 are routed per token, a 512-token
#: vocabulary, 32x32 images, 64 audio frames (Whisper: ``2 * max_source_positions``). Every
#: tiny model of the test matrix is under 2M parameters.
TINY: dict[str, int] = {
    # depth
    "num_hidden_layers": 2,
    "num_layers": 2,
    "num_decoder_layers": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    # width
    "hidden_size": 64,
    "d_model": 64,
    "word_embed_proj_dim": 64,
    "projection_dim": 64,
    "pooler_hidden_size": 64,
    "pooler_output_size": 64,
    "intermediate_size": 128,
    "ffn_dim": 128,
    "ffn_hidden_size": 128,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "d_ff": 128,
    # heads
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_kv_heads": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "num_heads": 2,
    "head_dim": 32,
    "d_kv": 32,
    # experts
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 128,
    # vocabulary, images, audio
    "vocab_size": 512,
    "image_size": 32,
    "max_source_positions": 32,
    "max_target_positions": 64,
}

#: Staged vision models (a ``depths`` list: Swin, ConvNeXt): two stages of one block, the
#: per-stage lists two long, and the width of the first stage. Their ``num_layers`` and
#: ``hidden_size`` follow from these (:data:`TINY` leaves them alone).
TINY_STAGES: dict[str, Any] = {
    "depths": [1, 1],
    "num_stages": 2,
    "hidden_sizes": [16, 32],
    "num_heads": [1, 2],
    "embed_dim": 16,
    "window_size": 4,
}

_STAGED_SKIP = (
    "num_layers",
    "num_hidden_layers",
    "hidden_size",
    "num_heads",
    "num_attention_heads",
)

#: Token ids a config names; each one at or above the (tiny) vocabulary is moved inside it.
SPECIAL_IDS = (
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "cls_token_id",
    "mask_token_id",
    "decoder_start_token_id",
    "start_token_id",
)


def sub_configs(config: Any) -> dict[str, Any]:
    """The configs a config holds as attributes (``text_config``, ``vision_config``, ...)."""
    from transformers import PretrainedConfig

    return {k: v for k, v in vars(config).items() if isinstance(v, PretrainedConfig)}


def _settable(config: Any, key: str) -> bool:
    """Whether ``key`` is an attribute of ``config`` that can be set (not a read-only
    property such as Falcon's ``head_dim``)."""
    if not hasattr(config, key):
        return False
    static = inspect.getattr_static(type(config), key, None)
    return not (isinstance(static, property) and static.fset is None)


def _tiny_changes(config: Any) -> dict[str, Any]:
    """What ``:tiny`` sets on this config (its sub-configs not included)."""
    staged = isinstance(getattr(config, "depths", None), (list, tuple))
    changes: dict[str, Any] = {}
    if staged:
        changes.update({k: v for k, v in TINY_STAGES.items() if _settable(config, k)})
    for key, value in TINY.items():
        if staged and key in _STAGED_SKIP:
            continue
        if _settable(config, key) and getattr(config, key) is not None:
            changes[key] = value
    patch = getattr(config, "patch_size", None)
    if "image_size" in changes and isinstance(patch, int):
        changes["patch_size"] = max(1, min(patch, changes["image_size"] // 4))
    vocab = changes.get("vocab_size")
    if isinstance(vocab, int):  # token ids the config names move inside the new vocabulary
        for key in SPECIAL_IDS:
            current = getattr(config, key, None)
            if isinstance(current, int) and current >= vocab:
                changes[key] = vocab - 1
            elif isinstance(current, list) and any(
                isinstance(i, int) and i >= vocab for i in current
            ):
                changes[key] = [min(i, vocab - 1) for i in current]
    return changes


def _shrunk(config: Any) -> Any:
    """A tiny copy of a sub-config: its own class built from the tiny values (nested
    sub-configs shrunk first)."""
    aliases = getattr(type(config), "attribute_map", {}) or {}
    kwargs = {aliases.get(k, k): v for k, v in _tiny_changes(config).items()}
    kwargs.update({k: _shrunk(v) for k, v in sub_configs(config).items()})
    return _clamp_ids(type(config)(**kwargs))


def _clamp_ids(config: Any) -> Any:
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int):
        for key in SPECIAL_IDS:
            current = getattr(config, key, None)
            if isinstance(current, int) and current >= vocab:
                setattr(config, key, vocab - 1)
    return config


def _unknown_name(spec: str, name: str) -> Exception:
    known = list(HF_CHECKPOINTS)
    guess = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean {guess[0]!r}?" if guess else ""
    return model_error(
        f"{spec!r}: {name!r} is neither a checkpoint name ampkit knows nor a "
        f"transformers model type.{hint} Known names: {', '.join(known)}; or any model "
        "type of the installed transformers (llama, mistral, ...). For other models pass "
        "package.module:factory."
    )


def hf_config(
    transformers: Any,
    spec: str,
    name: str,
    tiny: bool,
    overrides: dict[str, Any],
    *,
    allow_large: bool = False,
) -> Any:
    """The config of ``hf:<name>`` with the checkpoint's preset, ``:tiny`` and ``overrides``
    (config attribute names) applied, built through the config's own constructor.

    Raises:
        ConfigurationError: an unknown name, an override the config has no attribute for or
            cannot set, a size that is not positive, a model estimated above the size limit
            (:mod:`ampkit.models.size`; unless ``allow_large``), or values the config's
            constructor refuses.
    """
    model_type, preset = HF_CHECKPOINTS.get(name, (name, {}))
    try:
        with quiet_loggers():  # some library defaults warn about themselves (SigLIP's ids)
            default = transformers.AutoConfig.for_model(model_type)
    except ValueError:
        raise _unknown_name(spec, name) from None
    for key in overrides:
        if not hasattr(default, key):
            names = [k for k in default.to_dict() if not k.startswith("_")]
            guess = difflib.get_close_matches(key, names, n=1)
            hint = f" Did you mean {guess[0]!r}?" if guess else ""
            raise model_error(
                f"{spec!r}: {type(default).__name__} has no setting {key!r}.{hint} "
                "Options are the config's own attribute names (or tiny, seq_len, padding)."
            )
        if not _settable(default, key):
            raise model_error(
                f"{spec!r}: {type(default).__name__}.{key} is read-only (the config derives "
                "it from other settings). Set those instead."
            )
    aliases = getattr(type(default), "attribute_map", {}) or {}

    def canonical(values: dict[str, Any]) -> dict[str, Any]:
        # GPT-2's num_hidden_layers is n_layer: one name per setting, so later ones win
        return {aliases.get(k, k): v for k, v in values.items()}

    kwargs: dict[str, Any] = canonical(preset)
    if tiny:
        kwargs.update(canonical(_tiny_changes(default)))
        kwargs.update({k: _shrunk(v) for k, v in sub_configs(default).items()})
    kwargs.update(canonical(overrides))
    check_overrides(spec, default, canonical(overrides))
    check_size(spec, default, kwargs, allow_large=allow_large)  # before any list is sized
    try:
        config = transformers.AutoConfig.for_model(model_type, **kwargs)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        raise model_error(
            f"{spec!r}: transformers refused the {type(default).__name__} with these "
            f"settings: {lines[0]}. Change the options so the config accepts them."
        ) from None
    _clamp_ids(config)
    if (
        getattr(config, "is_encoder_decoder", False)
        and getattr(config, "decoder_start_token_id", None) is None
    ):
        config.decoder_start_token_id = getattr(config, "pad_token_id", None) or 0
    return config
