"""The precision names, dtypes and loss scaling are the modes' own facts: declared on each mode
class, read torch-free by the parser (``precision.spelling``), and the policy's dtypes follow
from them."""

from __future__ import annotations

import subprocess
import sys
from typing import ClassVar

import pytest
import torch

from ampkit.errors import ConfigurationError
from ampkit.precision.modes import MODES, PrecisionMode, register_mode, unregister_mode
from ampkit.precision.policy import (
    FP8_RECIPES,
    PRECISION_ALIASES,
    analysis_policy,
    parse_precision,
    register_precision,
    resolve_precision,
    unregister_precision,
    uses_loss_scaling,
)
from ampkit.precision.spelling import PrecisionFacts, precision_facts


def test_the_modes_and_the_parser_import_no_torch():
    code = (
        "import sys\n"
        "from ampkit.precision.spelling import parse_precision, PRECISION_ALIASES\n"
        "from ampkit.precision.modes import MODES, cli_options\n"
        "assert parse_precision('bf16-mixed').precision == 'bf16'\n"
        "assert parse_precision('fp8-rowwise').fp8_recipe == 'rowwise'\n"
        "assert sorted(cli_options()) and len(PRECISION_ALIASES) > 5\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_every_spelling_is_one_a_mode_class_declares():
    declared = {
        spelled: facts.name
        for cls in set(MODES.values())
        for facts in cls.precision_facts
        for spelled in facts.spellings
    }
    assert dict(PRECISION_ALIASES) == declared
    assert declared["bfloat16"] == "bf16" and declared["16-mixed"] == "fp16"
    assert dict(FP8_RECIPES) == dict(MODES["fp8"].precision_facts[0].recipes)


@pytest.mark.parametrize("name", ["fp32", "fp16", "bf16", "bf16-true", "fp8"])
def test_the_policy_dtypes_and_scaling_are_the_mode_facts(name):
    facts = precision_facts(name)
    policy = analysis_policy(name, "cpu")
    assert policy.compute_dtype == getattr(torch, facts.compute_dtype)
    assert policy.param_dtype == getattr(torch, facts.param_dtype)
    assert policy.uses_scaler is facts.uses_scaler is uses_loss_scaling(name)
    assert name in MODES[name].precisions


def test_the_views_are_read_only():
    with pytest.raises(TypeError):
        PRECISION_ALIASES["half"] = "fp16"  # type: ignore[index]


class _Declared(PrecisionMode):
    """A mode that declares its facts: fp32 storage, fp16 compute, scaled loss."""

    precision_facts: ClassVar[tuple[PrecisionFacts, ...]] = (
        PrecisionFacts("toy-declared", ("declared",), compute_dtype="float16", uses_scaler=True),
    )

    def __init__(self) -> None:
        super().__init__("toy-declared")


def test_a_mode_registered_with_its_declared_facts_is_a_precision_everywhere():
    register_mode(_Declared)
    try:
        assert _Declared.precisions == ("toy-declared",)
        assert PRECISION_ALIASES["declared"] == "toy-declared"
        assert parse_precision(" Declared ").precision == "toy-declared"
        policy = resolve_precision("declared", "cpu")
        assert policy.compute_dtype == torch.float16 and policy.uses_scaler
        assert _Declared().measured_as == "fp16"
    finally:
        unregister_mode("toy-declared")
    assert "declared" not in PRECISION_ALIASES
    with pytest.raises(ConfigurationError, match="unknown precision 'declared'"):
        parse_precision("declared")


def test_facts_declared_and_given_again_are_refused():
    with pytest.raises(ConfigurationError, match="declares its precision_facts"):
        register_mode(_Declared, compute_dtype=torch.float16)
    assert "toy-declared" not in MODES


def test_register_precision_alone_still_adds_a_name():
    register_precision("toy-plain", compute_dtype=torch.bfloat16, aliases=("plain",))
    try:
        policy = analysis_policy("plain", "cpu")
        assert (policy.precision, policy.compute_dtype) == ("toy-plain", torch.bfloat16)
        assert policy.param_dtype == torch.float32 and not policy.uses_scaler
    finally:
        unregister_precision("toy-plain")
    with pytest.raises(ConfigurationError, match="cannot be removed"):
        unregister_precision("bf16")


def test_a_dtype_no_precision_trains_in_is_refused():
    with pytest.raises(ConfigurationError, match="compute_dtype 'int8'"):
        register_precision("toy-int", compute_dtype=torch.int8)
    assert "toy-int" not in PRECISION_ALIASES
