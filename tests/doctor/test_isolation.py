"""The doctor leaves the model as it found it: BatchNorm statistics, modes, RNG, caches."""

from __future__ import annotations

import enum

import torch
from torch import nn

import ampkit
from ampkit.doctor.isolation import isolated_copy, preserved_state
from ampkit.models.resolve import build_model


def test_batchnorm_statistics_and_rng_survive_diagnose_with_the_precision_map():
    built = build_model("convnet", batch_size=2)
    model = built.model
    stats = {k: v.clone() for k, v in model.state_dict().items() if "running" in k or "num_" in k}
    rng = torch.get_rng_state()
    ampkit.diagnose(model, built.closure(), "bf16", steps=1, with_precision_map=True)
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in stats.items())
    assert torch.equal(torch.get_rng_state(), rng)
    assert model.training


class _Cache:
    """Stands for a key/value cache: an object whose tensors a forward appends to."""

    def __init__(self) -> None:
        self.layers = [{"keys": torch.zeros(1, 2)}]

    def update(self, keys: torch.Tensor) -> torch.Tensor:
        layer = self.layers[0]
        layer["keys"] = torch.cat([layer["keys"], keys])
        return layer["keys"]


class _Mode(enum.Enum):
    A = 1


def test_isolated_copy_shares_no_state_but_keeps_modules_and_sharing():
    cache, linear = _Cache(), nn.Linear(2, 2)
    shared = torch.ones(3)
    args = ({"cache": cache, "module": linear, "mode": _Mode.A}, [shared, shared], torch.Size([2]))
    copied = isolated_copy(args)
    copied[0]["cache"].update(torch.ones(1, 2))
    assert cache.layers[0]["keys"].shape == (1, 2)  # the original cache was not written
    assert copied[0]["module"] is linear and copied[0]["mode"] is _Mode.A
    assert copied[1][0] is copied[1][1] and copied[1][0] is not shared
    assert isinstance(copied[2], torch.Size)


def test_use_cache_is_off_inside_and_restored_after_an_error():
    class Config:
        use_cache = True

    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    model.config = Config()  # type: ignore[assignment]
    model[1].eval()
    try:
        with preserved_state(model, torch.device("cpu")):
            assert model.config.use_cache is False
            model.train()
            torch.rand(3)
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert model.config.use_cache is True and model.training and not model[1].training
