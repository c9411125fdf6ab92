"""Inference under the precision policy: no autograd, autocast, outputs back in fp32."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ampkit._tree import map_tensors, to_device
from ampkit.precision.policy import Policy, resolve_precision

__all__ = ["predict"]


def predict(
    model: nn.Module,
    inputs: Any,
    precision: str | Policy = "auto",
    device: torch.device | str | None = None,
) -> Any:
    """Run ``model(inputs)`` for inference and return its outputs with floats in fp32.

    Runs under ``torch.inference_mode`` and the policy's autocast (matmuls in bf16/fp16,
    softmax/norms in fp32, as in training), with the model in eval mode for the call (its
    previous mode is restored). ``inputs`` are moved to the policy's device; a tuple or list
    is unpacked into positional arguments, a dict into keyword arguments. The model must
    already be on that device.

    Raises:
        ConfigurationError / UnsupportedPrecisionError: as :func:`~ampkit.resolve_precision`.
    """
    policy = precision if isinstance(precision, Policy) else resolve_precision(precision, device)
    inputs = to_device(inputs, policy.device)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), policy.autocast():
            if isinstance(inputs, dict):
                output = model(**inputs)
            elif isinstance(inputs, (tuple, list)):
                output = model(*inputs)
            else:
                output = model(inputs)
    finally:
        model.train(was_training)
    return map_tensors(lambda t: t.float() if t.is_floating_point() else t, output)
