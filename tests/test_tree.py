"""The one walker over nested tensors: containers rebuilt with their own types."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ampkit._tree import floating_tensors, iter_tensors, map_tensors, to_device, to_fp32


class Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


@dataclass
class Output(OrderedDict):
    """The shape of a Hugging Face ModelOutput: an ordered dict rebuilt from keywords."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None

    def __post_init__(self) -> None:
        for key in ("loss", "logits"):
            if getattr(self, key) is not None:
                self[key] = getattr(self, key)

    def to_tuple(self) -> tuple:
        return tuple(self.values())


def test_map_tensors_keeps_container_types_and_non_tensor_leaves():
    tree = {
        "x": [torch.ones(2), (torch.zeros(1), "label")],
        "p": Pair(torch.ones(1), torch.ones(1)),
    }
    out = map_tensors(lambda t: t + 1, tree)
    assert isinstance(out["x"], list) and isinstance(out["x"][1], tuple)
    assert isinstance(out["p"], Pair) and out["p"].a.item() == 2.0
    assert out["x"][1][1] == "label" and torch.equal(out["x"][0], torch.full((2,), 2.0))


def test_map_tensors_rebuilds_a_model_output_with_attribute_access():
    out = map_tensors(lambda t: t * 2, Output(loss=torch.tensor(1.5), logits=torch.ones(2, 3)))
    assert isinstance(out, Output)
    assert out.loss.item() == 3.0 and out["logits"].sum().item() == 12.0


def test_to_fp32_casts_only_low_precision_floats():
    tree = (
        torch.ones(1, dtype=torch.bfloat16),
        torch.ones(1, dtype=torch.float64),
        torch.ones(1, dtype=torch.int64),
    )
    out = to_fp32(tree)
    assert [t.dtype for t in out] == [torch.float32, torch.float64, torch.int64]


def test_iteration_order_and_floating_filter():
    a, b, c = torch.ones(1), torch.ones(1, dtype=torch.int32), torch.zeros(2)
    assert [id(t) for t in iter_tensors({"k": [a, b], "z": c})] == [id(a), id(b), id(c)]
    assert [id(t) for t in floating_tensors([a, b, (c,)])] == [id(a), id(c)]


def test_to_device_sets_channels_last_on_4d_floats_only():
    images, mask = torch.randn(2, 3, 4, 4), torch.ones(2, 1, 4, 4, dtype=torch.bool)
    moved = to_device({"images": images, "mask": mask}, "cpu", channels_last=True)
    assert moved["images"].is_contiguous(memory_format=torch.channels_last)
    assert moved["mask"].is_contiguous()
