import warnings

import pytest
import torch

from ampkit import (
    ConfigurationError,
    Policy,
    PrecisionWarning,
    UnsupportedPrecisionError,
    precision_session,
    resolve_precision,
)
from ampkit.precision.hardware import HardwareInfo
from ampkit.precision.policy import PRECISION_ALIASES, parse_precision


def gpu(major: int, minor: int, name: str = "Test GPU") -> HardwareInfo:
    return HardwareInfo(
        device=torch.device("cuda", 0),
        name=name,
        cuda_capability=(major, minor),
        cuda_bf16=major >= 8,
        torchao_available=True,
    )


def cpu(native_bf16: bool) -> HardwareInfo:
    return HardwareInfo(device=torch.device("cpu"), name="Test CPU", cpu_native_bf16=native_bf16)


@pytest.mark.parametrize(
    ("hardware", "precision", "dtype", "scaler"),
    [
        (gpu(9, 0, "H200"), "bf16", torch.bfloat16, False),
        (gpu(8, 0, "A100"), "bf16", torch.bfloat16, False),
        (gpu(7, 0, "V100"), "fp16", torch.float16, True),
        (gpu(7, 5, "T4"), "fp16", torch.float16, True),
        (gpu(6, 1, "GTX 1080"), "fp32", torch.float32, False),
        (cpu(native_bf16=True), "bf16", torch.bfloat16, False),
        (cpu(native_bf16=False), "fp32", torch.float32, False),
    ],
)
def test_auto_picks_from_hardware(hardware, precision, dtype, scaler):
    policy = resolve_precision("auto", hardware=hardware)
    assert (policy.precision, policy.compute_dtype, policy.uses_scaler) == (
        precision,
        dtype,
        scaler,
    )
    assert policy.device == hardware.device
    assert hardware.name in policy.reason and policy.reason.endswith(".")


def test_auto_never_picks_fp16_on_cpu():
    for native in (True, False):
        assert resolve_precision("auto", hardware=cpu(native)).precision != "fp16"


@pytest.mark.parametrize(("spelling", "canonical"), sorted(PRECISION_ALIASES.items()))
def test_aliases_map_to_canonical(spelling, canonical):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrecisionWarning)
        policy = resolve_precision(spelling.upper(), hardware=gpu(9, 0))
    assert policy.precision == canonical
    assert policy.requested == spelling.upper()


def test_unknown_precision_lists_names_and_suggests():
    with pytest.raises(ConfigurationError) as info:
        resolve_precision("bf61", hardware=cpu(True))
    message = str(info.value)
    assert "'bf61'" in message and "Did you mean 'bf16'?" in message
    for name in ("auto", "fp32", "fp16", "bf16", "fp16-mixed", "bf16-mixed"):
        assert name in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("word", "meant"), [("half", "fp16"), ("single", "fp32"), ("HALF", "fp16")]
)
def test_a_word_for_a_precision_suggests_its_name(word, meant):
    with pytest.raises(
        ConfigurationError, match=rf"unknown precision '{word}'.*Did you mean '{meant}'\?"
    ):
        parse_precision(word)


def test_explicit_fp16_on_cpu_is_honoured_with_one_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's normal filter: once per call site
        for _ in range(3):
            policy = resolve_precision("fp16", hardware=cpu(True))
    assert policy.precision == "fp16" and policy.uses_scaler
    relevant = [w for w in caught if issubclass(w.category, PrecisionWarning)]
    assert len(relevant) == 1
    assert "60x slower" in str(relevant[0].message)


def test_bf16_on_gpu_without_bf16_raises_with_fix():
    with pytest.raises(UnsupportedPrecisionError, match="Use fp16"):
        resolve_precision("bf16", hardware=gpu(7, 0, "V100"))


def test_bf16_on_cpu_without_native_bf16_says_it_may_be_slower():
    policy = resolve_precision("bf16", hardware=cpu(False))
    assert policy.precision == "bf16" and "slower" in policy.reason


def test_tf32_defaults_on_for_ampere_and_off_elsewhere():
    assert resolve_precision("fp32", hardware=gpu(8, 0)).tf32
    assert not resolve_precision("fp32", hardware=gpu(8, 0), tf32=False).tf32
    assert not resolve_precision("fp16", hardware=gpu(7, 0)).tf32
    assert not resolve_precision("fp32", hardware=cpu(True)).tf32


def test_tf32_requested_without_support_raises():
    with pytest.raises(UnsupportedPrecisionError, match="TF32"):
        resolve_precision("fp32", hardware=gpu(7, 0), tf32=True)


def test_policy_is_frozen():
    policy = resolve_precision("fp32", hardware=cpu(False))
    with pytest.raises(AttributeError):
        policy.precision = "bf16"  # type: ignore[misc]


def test_real_cpu_resolution_matches_probe():
    policy = resolve_precision("auto", "cpu")
    assert policy.precision in ("bf16", "fp32")
    assert isinstance(policy, Policy)


def test_autocast_of_fp32_policy_is_an_explicit_fp32_region():
    policy = resolve_precision("fp32", "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16), policy.autocast():
        out = torch.ones(4, 4) @ torch.ones(4, 4)
    assert out.dtype == torch.float32


def test_autocast_of_bf16_policy_runs_matmul_in_bf16_and_loss_in_fp32():
    policy = resolve_precision("bf16", "cpu")
    x = torch.randn(4, 8)
    with policy.autocast():
        logits = torch.nn.functional.linear(x, torch.randn(3, 8))
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 0]))
    assert logits.dtype == torch.bfloat16
    assert loss.dtype == torch.float32


def test_session_restores_global_settings_even_on_error():
    policy = Policy(
        precision="fp32",
        device=torch.device("cuda", 0),
        compute_dtype=torch.float32,
        uses_scaler=False,
        reason="test.",
        tf32=True,
    )
    before = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    with pytest.raises(RuntimeError, match="boom"), precision_session(policy):
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.backends.cudnn.allow_tf32 is True
        raise RuntimeError("boom")
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == before


def test_importing_ampkit_changes_no_torch_setting():
    import subprocess
    import sys

    code = (
        "import torch; before = (torch.get_float32_matmul_precision(), "
        "torch.backends.cudnn.allow_tf32, torch.get_default_dtype(), torch.is_autocast_enabled()); "
        "import warnings; filters = list(warnings.filters); import logging; "
        "handlers = list(logging.getLogger().handlers); "
        "import ampkit, ampkit.cli; "
        "after = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32, "
        "torch.get_default_dtype(), torch.is_autocast_enabled()); "
        "assert before == after, (before, after); assert filters == warnings.filters; "
        "assert handlers == logging.getLogger().handlers"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
