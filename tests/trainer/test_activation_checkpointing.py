"""Activation checkpointing in one process (no distributed strategy) and the checks of the
bigger-model settings (HSDP shard size, CPU offload): gradients and weights bitwise equal to a
run without checkpointing on CPU fp32, dropout included (the recomputation replays the RNG),
and the forward pass of a checkpointed module really runs again in the backward pass."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ampkit
from ampkit import ConfigurationError, DistributedConfig
from ampkit.checkpoint.folder import read_weights
from ampkit.trainer.parallel import apply_activation_checkpointing, hsdp_mesh


class Block(nn.Module):
    calls = 0  # forward passes, counted across instances

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.drop = nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        Block.calls += 1
        return self.drop(torch.tanh(self.linear(x)))


class Net(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.inp = nn.Linear(8, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(3))
        self.out = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [
        (torch.randn(8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(4)
    ]


def grads_after_one_step(targets) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = Net()
    if targets:
        apply_activation_checkpointing(model, targets)
    x, y = batches()[0]
    nn.functional.cross_entropy(model(x), y).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize(("targets", "recomputed"), [([Block], 3), (["blocks.0", "blocks.2"], 2)])
def test_gradients_bitwise_equal_with_dropout(targets, recomputed):
    plain = grads_after_one_step(())
    Block.calls = 0
    checkpointed = grads_after_one_step(targets)
    assert checkpointed.keys() == plain.keys()  # names unchanged
    for name, grad in plain.items():
        assert torch.equal(checkpointed[name], grad), name
    # each checkpointed block ran twice: forward, then recomputed in backward
    assert Block.calls == 3 + recomputed


def fit(tmp_path, name: str, **distributed) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    trainer = ampkit.Trainer(
        Net(),
        lambda params: torch.optim.AdamW(params, lr=1e-2),
        max_steps=4,
        loss_fn=nn.functional.cross_entropy,
        precision="fp32",
        device="cpu",
        distributed=DistributedConfig(**distributed),
        checkpoint=ampkit.CheckpointConfig(tmp_path / name, every=2),
        logging=ampkit.LoggingConfig(progress_bar=False),
    )
    trainer.fit(batches())
    return {k: v.clone() for k, v in trainer.raw_model.state_dict().items()}


def test_trainer_without_strategy_trains_bitwise_equal_and_checkpoints_match(tmp_path):
    plain = fit(tmp_path, "plain", strategy="none")
    checkpointed = fit(tmp_path, "ac", strategy="none", activation_checkpointing=[Block])
    assert checkpointed.keys() == plain.keys()
    for name, tensor in plain.items():
        assert torch.equal(checkpointed[name], tensor), name
    # the checkpoints hold the same names and values: either run resumes the other's
    a = read_weights(tmp_path / "plain/step-00000004").tensors
    b = read_weights(tmp_path / "ac/step-00000004").tensors
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_applying_twice_checkpoints_once():
    model = Net()
    apply_activation_checkpointing(model, [Block])
    apply_activation_checkpointing(model, ["blocks.0"])  # e.g. a second fit() of one Trainer
    Block.calls = 0
    x, y = batches()[0]
    nn.functional.cross_entropy(model(x), y).backward()
    assert Block.calls == 6  # each block: forward once, recomputed once


def test_unknown_module_name_is_refused_with_a_suggestion():
    with pytest.raises(ConfigurationError, match=r"'blocks\.9' is not a module.*Did you mean"):
        apply_activation_checkpointing(Net(), ["blocks.9"])
    with pytest.raises(ConfigurationError, match="no module of Net is a LayerNorm"):
        apply_activation_checkpointing(Net(), [nn.LayerNorm])
    with pytest.raises(ConfigurationError, match="'blocks' is a ModuleList, which is never called"):
        apply_activation_checkpointing(Net(), ["blocks"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"activation_checkpointing": "blocks.0"}, "is not a list of modules"),
        ({"activation_checkpointing": [3]}, "neither a module name nor an nn.Module"),
        ({"hsdp_shard_size": 2, "strategy": "fsdp"}, "applies to strategy='hsdp' only"),
        ({"hsdp_shard_size": 0, "strategy": "hsdp"}, "hsdp_shard_size"),
        ({"cpu_offload": True, "strategy": "ddp"}, "needs strategy='fsdp' or 'hsdp'"),
        ({"cpu_offload": 1, "strategy": "fsdp"}, "cpu_offload=1 is invalid"),
    ],
)
def test_config_refuses(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        DistributedConfig(**kwargs)


def test_hsdp_shard_size_must_divide_the_world():
    with pytest.raises(ConfigurationError, match="= 3 does not divide the world size 4"):
        hsdp_mesh("cpu", 4, 3)


def test_sharding_strategy_with_an_optimizer_instance_is_refused():
    model = Net()
    with pytest.raises(ConfigurationError, match="strategy='hsdp' replaces the parameters"):
        ampkit.Trainer(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            max_steps=1,
            distributed=DistributedConfig(strategy="hsdp"),
        )


def test_sharding_settings_in_one_process_are_noted(tmp_path):
    torch.manual_seed(0)
    trainer = ampkit.Trainer(
        Net(),
        lambda params: torch.optim.AdamW(params, lr=1e-2),
        max_steps=1,
        loss_fn=nn.functional.cross_entropy,
        precision="fp32",
        device="cpu",
        distributed=DistributedConfig(strategy="hsdp", hsdp_shard_size=2, cpu_offload=True),
        logging=ampkit.LoggingConfig(progress_bar=False),
    )
    notes = trainer.fit(batches()).notes
    assert (
        "strategy='hsdp', hsdp_shard_size=2, cpu_offload=True: a single process has nothing "
        "to shard over, so the model trains unsharded (launch with torchrun to shard it)"
    ) in notes
