"""How large a model the options of ``hf:<name>:options`` ask for, told before anything is built.

An override such as ``n_layer=100000000`` would otherwise build layer after layer until the
machine runs out of memory. :func:`check_overrides` refuses sizes that are not positive
(``vocab_size=0``: the batch maker's ``randint(0, 0)`` traceback before), and :func:`check_size`
estimates the parameters of a transformer config from its sizes alone (no module built):

    layers * (4 * hidden**2 + 2 * hidden * feed_forward) + (vocabulary + positions) * hidden

and refuses more than :data:`LARGE_PARAMETERS` parameters or :data:`LARGE_LAYERS` layers
unless the caller allows large models (``--allow-large``). The estimate is within 1% of the
built model for GPT-2 and BERT and 11% for T5 (biases, norms and relative positions left out;
``hf:gpt2`` 124.3M estimated, 124.4M built); training memory is about
:data:`TRAIN_BYTES_PER_PARAMETER` per parameter (fp32 weights, gradients and AdamW's two
moments) before activations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ampkit.models.built import model_error

__all__ = [
    "LARGE_LAYERS",
    "LARGE_PARAMETERS",
    "TRAIN_BYTES_PER_PARAMETER",
    "check_overrides",
    "check_size",
    "estimate_parameters",
]

#: The most parameters an ``hf:`` model is built with unless large models are allowed (GPT-2
#: large has 774M; 2B parameters take 32 GB to train in mixed precision).
LARGE_PARAMETERS = 2_000_000_000
#: The most layers (encoder and decoder together) built unless large models are allowed.
LARGE_LAYERS = 1024
#: Bytes of training state per parameter: fp32 weights, gradients, AdamW's two moments.
TRAIN_BYTES_PER_PARAMETER = 16

_LAYERS = ("num_hidden_layers", "num_layers", "n_layer", "encoder_layers")
_DECODER_LAYERS = ("num_decoder_layers", "decoder_layers")
_HIDDEN = ("hidden_size", "d_model", "n_embd")
_FEED_FORWARD = ("intermediate_size", "d_ff", "n_inner", "ffn_dim", "encoder_ffn_dim")
_POSITIONS = ("max_position_embeddings", "n_positions")
#: Integer settings that may be 0 or negative (token ids, indices, counts that may be none).
_MAY_BE_ZERO = ("_id", "_ids", "_index", "_idx")


def _lookup(default: Any, values: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    """The first of ``names`` set in ``values`` (the constructor's keywords) or ``default``,
    as an int (None: none is an int)."""
    aliases = getattr(type(default), "attribute_map", {}) or {}
    keys = [key for name in names for key in (aliases.get(name, name), name)]
    # the keywords first: GPT-2's n_layer=4 is its num_hidden_layers, whose default is 12
    found = [values[key] for key in keys if key in values]
    found += [getattr(default, key, None) for key in keys]
    return next((v for v in found if isinstance(v, int) and not isinstance(v, bool)), None)


def estimate_parameters(default: Any, values: Mapping[str, Any]) -> tuple[int, int]:
    """``(parameters, layers)`` of the config ``default`` built with the keywords ``values``,
    estimated from its sizes (0 parameters when it names no width: a composite config)."""
    layers = (_lookup(default, values, _LAYERS) or 0) + (
        _lookup(default, values, _DECODER_LAYERS) or 0
    )
    hidden = _lookup(default, values, _HIDDEN)
    if not hidden:
        return 0, layers
    feed_forward = _lookup(default, values, _FEED_FORWARD) or 4 * hidden
    tokens = (_lookup(default, values, ("vocab_size",)) or 0) + (
        _lookup(default, values, _POSITIONS) or 0
    )
    return layers * (4 * hidden * hidden + 2 * hidden * feed_forward) + tokens * hidden, layers


def check_overrides(spec: str, default: Any, overrides: Mapping[str, Any]) -> None:
    """Refuse an override of a positive integer setting (a size: ``vocab_size``, ``n_layer``)
    with a value that is not a positive integer.

    Raises:
        ConfigurationError: such an override (the message names it and the default).
    """
    for key, value in overrides.items():
        current = getattr(default, key, None)
        if key.endswith(_MAY_BE_ZERO) or isinstance(current, bool) or not isinstance(current, int):
            continue
        if current > 0 and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise model_error(
                f"{spec!r}: {key}={value!r} is invalid; {type(default).__name__}.{key} is a "
                f"size (default {current}) and must be an integer >= 1."
            )


def check_size(spec: str, default: Any, values: Mapping[str, Any], *, allow_large: bool) -> None:
    """Refuse a config whose estimated size is above :data:`LARGE_PARAMETERS` parameters or
    :data:`LARGE_LAYERS` layers, before it is built, unless ``allow_large``.

    Raises:
        ConfigurationError: the model would be too large (the message gives the estimate and
            the way past it).
    """
    if allow_large:
        return
    parameters, layers = estimate_parameters(default, values)
    if parameters <= LARGE_PARAMETERS and layers <= LARGE_LAYERS:
        return
    gigabytes = parameters * TRAIN_BYTES_PER_PARAMETER / 1e9
    raise model_error(
        f"{spec!r}: these options ask for about {parameters:.3g} parameters in {layers} layers "
        f"(about {gigabytes:,.0f} GB of fp32 weights, gradients and AdamW state), estimated "
        f"before building; the limit is {LARGE_PARAMETERS:,} parameters and {LARGE_LAYERS} "
        "layers. Use smaller options, or pass --allow-large to build it anyway."
    )
