"""Policy decisions for fp8 and bf16-true over injected hardware facts."""

from __future__ import annotations

import pytest
import torch

from ampkit import ConfigurationError, UnsupportedPrecisionError, resolve_precision
from ampkit.errors import MissingDependencyError
from ampkit.precision.hardware import HardwareInfo, fp8_capable


def gpu(major: int, minor: int, name: str = "Test GPU", torchao: bool = True, arch=None):
    return HardwareInfo(
        device=torch.device("cuda", 0),
        name=name,
        cuda_capability=(major, minor),
        cuda_bf16=major >= 8,
        gpu_arch=arch,
        torchao_available=torchao,
    )


def cpu(torchao: bool = True) -> HardwareInfo:
    return HardwareInfo(
        device=torch.device("cpu"),
        name="Test CPU",
        cpu_native_bf16=False,
        torchao_available=torchao,
    )


@pytest.mark.parametrize(
    ("hardware", "capable"),
    [
        (gpu(9, 0, "H200"), True),
        (gpu(8, 9, "L4"), True),
        (gpu(10, 0, "B200"), True),
        (gpu(8, 6, "RTX 3090"), False),
        (gpu(8, 0, "A100"), False),
        (gpu(9, 4, "AMD Instinct MI300X", arch="gfx942:sramecc+:xnack-"), True),
        (gpu(9, 0, "AMD Instinct MI250X", arch="gfx90a"), False),
        (cpu(), False),
    ],
)
def test_fp8_capable_follows_capability_and_mi300(hardware, capable):
    assert fp8_capable(hardware) is capable


@pytest.mark.parametrize(
    ("spelling", "recipe"),
    [
        ("fp8", "tensorwise"),
        ("fp8-tensorwise", "tensorwise"),
        ("FP8-Rowwise", "rowwise"),
        ("fp8-rowwise-gw-hp", "rowwise_with_gw_hp"),
    ],
)
def test_fp8_spellings_pick_the_recipe_with_bf16_autocast_and_no_scaler(spelling, recipe):
    policy = resolve_precision(spelling, hardware=gpu(9, 0, "H100"))
    assert (policy.precision, policy.fp8_recipe) == ("fp8", recipe)
    assert policy.compute_dtype == torch.bfloat16 and not policy.uses_scaler
    assert policy.param_dtype == torch.float32
    assert "fp8 tensor cores" in policy.reason


def test_fp8_on_gpu_below_8_9_is_refused_with_the_reason():
    with pytest.raises(UnsupportedPrecisionError) as info:
        resolve_precision("fp8", hardware=gpu(8, 0, "A100"))
    message = str(info.value)
    assert "A100 (compute capability 8.0)" in message and "8.9" in message and "bf16" in message


def test_fp8_on_cpu_is_refused_unless_emulated():
    with pytest.raises(UnsupportedPrecisionError, match="emulate=True"):
        resolve_precision("fp8", hardware=cpu())
    policy = resolve_precision("fp8", hardware=cpu(), emulate=True)
    assert policy.emulate and policy.precision == "fp8" and "emulat" in policy.reason


def test_fp8_without_torchao_names_the_extra():
    with pytest.raises(MissingDependencyError, match=r"pip install 'ampkit\[fp8\]'"):
        resolve_precision("fp8", hardware=gpu(9, 0, torchao=False))


def test_emulate_is_refused_for_other_precisions():
    with pytest.raises(ConfigurationError, match="emulate=True applies to fp8 only"):
        resolve_precision("bf16", hardware=cpu(), emulate=True)


def test_auto_never_picks_fp8_or_bf16_true():
    assert resolve_precision("auto", hardware=gpu(9, 0, "H200")).precision == "bf16"


def test_bf16_true_stores_parameters_in_bf16_and_needs_bf16_hardware():
    policy = resolve_precision("bf16-true", hardware=gpu(8, 0))
    assert policy.precision == "bf16-true" and policy.param_dtype == torch.bfloat16
    assert policy.compute_dtype == torch.bfloat16 and not policy.uses_scaler
    with pytest.raises(UnsupportedPrecisionError, match="bf16"):
        resolve_precision("bf16-true", hardware=gpu(7, 0, "V100"))
