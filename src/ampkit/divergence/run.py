"""Run one side: the model (a copy) on one batch under one :class:`Setting`, forward and
backward, every module hooked (:meth:`Recorder.hooked`).

The step is the engine's: the mode prepares the model (bf16-true casts it, fp8 converts its
Linears), the forward runs under the mode's autocast, and fp16 scales the loss before backward
(the recorded gradients are divided by the scale again, so both sides speak unscaled units).
No optimizer step is taken: what is compared is one forward and one backward from the same
weights. Under ``torch.compile`` each hooked module call is a graph break (the hooks run
eagerly), so inductor compiles the code between module boundaries; parameter gradients are read
after backward, without hooks.
"""

from __future__ import annotations

import copy
import platform
from typing import Any

import torch

from ampkit._tree import to_device
from ampkit.divergence.recording import Record, Recorder, tensor_entry
from ampkit.divergence.settings import Setting
from ampkit.errors import ConfigurationError
from ampkit.models.built import BuiltModel
from ampkit.precision.engine import MixedPrecision, loss_tensor

__all__ = ["record_setting"]


def _load_weights(model: torch.nn.Module, weights: str, side: str) -> None:
    from ampkit.checkpoint.folder import read_weights

    state = read_weights(weights).tensors
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [
        f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
        for k in own
        if k in state and state[k].shape != own[k].shape
    ]
    if missing or unexpected or shapes:
        seen = "; ".join(
            part
            for part in (
                f"{len(missing)} missing ({', '.join(missing[:3])})" if missing else "",
                f"{len(unexpected)} unexpected ({', '.join(unexpected[:3])})" if unexpected else "",
                f"{len(shapes)} of another shape ({', '.join(shapes[:2])})" if shapes else "",
            )
            if part
        )
        raise ConfigurationError(
            f"{side}: the weights of {weights} do not fit the model: {seen}. Compare weights of "
            "the model --model builds (for a run of `ampkit train`, the same --n-layer, "
            "--n-embd and --seq-len)."
        )
    model.load_state_dict(state)


def _backward(model: torch.nn.Module, loss: torch.Tensor, scale: float) -> float:
    """Backward of ``loss * scale``; under a loss scale (fp16), halved until the gradients
    are finite, as the scaler backs off over skipped steps (at most down to 1). Returns the
    scale the recorded gradients were computed at."""
    params = [p for p in model.parameters() if p.requires_grad]
    while True:
        last = scale <= 1.0 or not torch.isfinite(loss).item()
        (loss.float() * scale).backward(retain_graph=not last)
        grads = [p.grad for p in params if p.grad is not None]
        if last or all(bool(torch.isfinite(g).all()) for g in grads):
            return scale
        for p in params:
            p.grad = None
        scale = max(1.0, scale / 2)


def record_setting(
    built: BuiltModel,
    setting: Setting,
    *,
    device: torch.device | str | None = None,
    step: int = 0,
    max_values: int = 4096,
) -> Record:
    """Record one forward and backward of ``built``'s model on ``batch(step)`` under
    ``setting``. ``built.model`` is left as it was (a deep copy runs).

    Raises:
        ConfigurationError: the precision does not run on the device, the weights do not fit.
        UnsupportedPrecisionError: the device cannot run the precision.
    """
    model = copy.deepcopy(built.model)
    if setting.weights is not None:
        _load_weights(model, setting.weights, setting.spelled)
    mp = MixedPrecision(setting.precision, device)
    model = mp.prepare_model(model.to(mp.device))
    runner: Any = model
    if setting.compile:
        runner = torch.compile(model)
    batch = to_device(built.batch(step), mp.device)
    record = Record(
        setting=setting.spelled,
        meta={
            "model": built.name,
            "precision": mp.policy.precision,
            "compute_dtype": str(mp.policy.compute_dtype).removeprefix("torch."),
            "reason": mp.policy.reason,
            "compile": setting.compile,
            "weights": setting.weights,
            "device": str(mp.device),
            "torch": torch.__version__,
            "host": platform.node(),
            "step": step,
        },
    )
    recorder = Recorder(record, max_values)
    model.train()
    with mp, recorder.hooked(model):
        with mp.autocast():
            loss = loss_tensor(built.loss(runner, batch))
        scale = _backward(model, loss, mp.scaler.get_scale() if mp.policy.uses_scaler else 1.0)
    entry, sample = tensor_entry(
        loss, key="loss", module="", kind="loss", order=len(record.entries), max_values=1
    )
    record.entries.append(entry)
    record.samples["loss"] = sample
    recorder.add_grads(model, scale)
    record.meta["loss"] = float(loss.detach())
    record.meta["loss_scale"] = scale
    return record
