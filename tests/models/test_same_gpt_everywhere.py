"""``--model gpt`` is one model in ``ampkit bench``, ``ampkit doctor`` and ``ampkit export``:
the same config, parameter count and (same seed) weights through each command's code path."""

from __future__ import annotations

import torch

from ampkit.bench.workloads import load_workload
from ampkit.deploy.sources import load_gpt
from ampkit.doctor.inputs import load_case
from ampkit.models.builtin import GPT_DEFAULTS
from ampkit.models.gpt import GPTConfig


def test_gpt_is_the_same_model_in_bench_doctor_and_export():
    bench = load_workload("gpt").model
    doctor = load_case("gpt").model
    default_doctor = load_case(None).model
    exported, context = load_gpt(None, seed=0)
    export = exported.gpt
    expected = GPTConfig(
        block_size=GPT_DEFAULTS["seq_len"],
        n_layer=GPT_DEFAULTS["n_layer"],
        n_head=GPT_DEFAULTS["n_head"],
        n_embd=GPT_DEFAULTS["n_embd"],
    )
    models = [bench, doctor, default_doctor, export]
    assert all(m.config == expected for m in models)
    assert context == expected.block_size
    counts = {sum(p.numel() for p in m.parameters()) for m in models}
    assert len(counts) == 1
    for other in models[1:]:
        pairs = zip(bench.state_dict().values(), other.state_dict().values(), strict=True)
        assert all(torch.equal(a, b) for a, b in pairs)


def test_the_bench_batch_size_option_changes_the_batch_not_the_model():
    small = load_workload("gpt", batch_size=2)
    assert small.batch(0)[0].shape == (2, GPT_DEFAULTS["seq_len"])
    assert small.model.config == load_workload("gpt").model.config
