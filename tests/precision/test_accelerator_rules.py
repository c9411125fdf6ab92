"""What ``auto`` picks, and which explicit precisions are accepted, on every accelerator family
ampkit has rules for: described with ``HardwareInfo`` data, no device needed."""

import pytest
import torch

from ampkit import UnsupportedPrecisionError, resolve_precision
from ampkit.errors import MissingDependencyError
from ampkit.precision.hardware import HardwareInfo, fp8_capable, rocm_arch


def nvidia(major: int, minor: int, name: str) -> HardwareInfo:
    return HardwareInfo(
        device=torch.device("cuda", 0),
        name=name,
        cuda_capability=(major, minor),
        cuda_bf16=major >= 8,
        torchao_available=True,
    )


def amd(arch: str, capability: tuple[int, int], name: str, torchao: bool = True) -> HardwareInfo:
    known = rocm_arch(arch)
    return HardwareInfo(
        device=torch.device("cuda", 0),
        name=name,
        cuda_capability=capability,  # ROCm reports gfx numbers here
        cuda_bf16=known.bf16 if known else None,
        gpu_arch=arch,
        torchao_available=torchao,
    )


def mac(bf16: bool) -> HardwareInfo:
    return HardwareInfo(
        device=torch.device("mps"), name="Apple M2 Pro", mps_bf16=bf16, torchao_available=True
    )


def intel(bf16: bool, fp16: bool = True, name: str = "Intel Data Center GPU Max 1550"):
    return HardwareInfo(
        device=torch.device("xpu", 0),
        name=name,
        xpu_bf16=bf16,
        xpu_fp16=fp16,
        torchao_available=True,
    )


V100, T4 = nvidia(7, 0, "Tesla V100"), nvidia(7, 5, "Tesla T4")
A100, L4 = nvidia(8, 0, "A100-SXM4"), nvidia(8, 9, "NVIDIA L4")
H100, B200 = nvidia(9, 0, "H100 SXM"), nvidia(10, 0, "NVIDIA B200")
MI100 = amd("gfx908:sramecc+:xnack-", (9, 0), "AMD Instinct MI100")
MI250X = amd("gfx90a:sramecc+:xnack-", (9, 0), "AMD Instinct MI250X")
MI300X = amd("gfx942:sramecc+:xnack-", (9, 4), "AMD Instinct MI300X")
MI355X = amd("gfx950", (9, 5), "AMD Instinct MI355X")
RX7900 = amd("gfx1100", (11, 0), "Radeon RX 7900 XTX")
MAX1550 = intel(bf16=True)
ARC_FP16 = intel(bf16=False, name="Intel fp16-only GPU")


@pytest.mark.parametrize(
    ("hw", "precision", "scaler", "says"),
    [
        (V100, "fp16", True, ["compute capability 7.0", "no bf16", "loss scaling"]),
        (T4, "fp16", True, ["compute capability 7.5", "no bf16", "loss scaling"]),
        (A100, "bf16", False, ["compute capability 8.0", "bf16 tensor cores"]),
        (L4, "bf16", False, ["compute capability 8.9", "bf16 tensor cores"]),
        (H100, "bf16", False, ["compute capability 9.0", "bf16 tensor cores"]),
        (B200, "bf16", False, ["compute capability 10.0", "bf16 tensor cores"]),
        (MI100, "bf16", False, ["gfx908", "MI100 (CDNA1)", "half the fp16 rate"]),
        (MI250X, "bf16", False, ["gfx90a", "MI200 (CDNA2)", "no fp8"]),
        (MI300X, "bf16", False, ["gfx942", "MI300 (CDNA3)", "bf16 and fp8"]),
        (MI355X, "bf16", False, ["gfx950", "MI350 (CDNA4)", "bf16 and fp8"]),
        (RX7900, "bf16", False, ["gfx1100", "RDNA3", "bf16 WMMA"]),
        (mac(bf16=True), "fp16", True, ["Apple MPS", "fp16", "loss scaling", "bf16 is accepted"]),
        (mac(bf16=False), "fp16", True, ["Apple MPS", "macOS 14+ and torch 2.6+"]),
        (MAX1550, "bf16", False, ["Intel XPU", "supports bf16", "no loss scaling"]),
        (ARC_FP16, "fp16", True, ["Intel XPU", "no bf16", "loss scaling"]),
    ],
)
def test_auto_picks_per_accelerator_and_says_why(hw, precision, scaler, says):
    policy = resolve_precision("auto", hardware=hw)
    assert (policy.precision, policy.uses_scaler) == (precision, scaler)
    assert policy.device == hw.device
    assert hw.name in policy.reason
    for words in says:
        assert words in policy.reason, (words, policy.reason)


@pytest.mark.parametrize("hw", [MI100, MI250X, MI300X, MI355X, RX7900])
def test_rocm_is_never_read_as_an_nvidia_compute_capability(hw):
    policy = resolve_precision("auto", hardware=hw)
    assert "compute capability" not in policy.reason and "Hopper" not in policy.reason
    assert hw.backend == "rocm"
    assert policy.tf32 is False  # (9, x) would mean TF32 on NVIDIA, not on ROCm


def test_intel_gpu_without_bf16_or_fp16_trains_in_fp32():
    policy = resolve_precision("auto", hardware=intel(bf16=False, fp16=False, name="Old iGPU"))
    assert policy.precision == "fp32"
    assert "Old iGPU (Intel XPU) has neither bf16 nor fp16" in policy.reason


@pytest.mark.parametrize(("hw", "capable"), [
    (V100, False), (A100, False), (L4, True), (H100, True), (B200, True),
    (MI100, False), (MI250X, False), (MI300X, True), (MI355X, True), (RX7900, False),
    (mac(True), False), (MAX1550, False),
])  # fmt: skip
def test_fp8_capable_per_generation(hw, capable):
    assert fp8_capable(hw) is capable


@pytest.mark.parametrize(("hw", "label"), [(MI300X, "gfx942"), (MI355X, "gfx950"), (H100, "9.0")])
def test_fp8_is_accepted_on_fp8_hardware_with_torchao(hw, label):
    policy = resolve_precision("fp8", hardware=hw)
    assert policy.precision == "fp8" and policy.fp8_recipe == "tensorwise"
    assert label in policy.reason and "fp8" in policy.reason


def test_fp8_on_mi300x_without_torchao_names_the_extra():
    with pytest.raises(MissingDependencyError, match=r"pip install 'ampkit\[fp8\]'"):
        resolve_precision("fp8", hardware=amd("gfx942", (9, 4), "MI300X", torchao=False))


@pytest.mark.parametrize(
    ("hw", "says"),
    [
        (MI250X, ["gfx90a", "MI200 (CDNA2)", "MI300 (gfx940-942)", "Use bf16"]),
        (MI100, ["gfx908", "Use bf16"]),
        (RX7900, ["gfx1100", "RDNA3", "Use bf16"]),
        (V100, ["compute capability 7.0", "8.9", "Use bf16"]),
        (mac(True), ["Apple MPS", "Apple GPUs", "Use fp16", "emulate=True"]),
        (MAX1550, ["Intel XPU", "Intel GPUs", "Use bf16"]),
    ],
)
def test_fp8_is_refused_where_there_are_no_fp8_units_and_says_what_to_use(hw, says):
    with pytest.raises(UnsupportedPrecisionError) as info:
        resolve_precision("fp8", hardware=hw)
    message = str(info.value)
    assert message.startswith("precision: 'fp8'") and hw.name in message
    if hw.backend == "rocm":
        assert "Hopper" not in message and "compute capability" not in message
    for words in says:
        assert words in message, (words, message)


@pytest.mark.parametrize(
    "hw", [A100, H100, MI100, MI250X, MI300X, MI355X, RX7900, mac(True), MAX1550]
)
@pytest.mark.parametrize("precision", ["bf16", "bf16-true"])
def test_bf16_is_accepted_where_the_device_has_it(hw, precision):
    policy = resolve_precision(precision, hardware=hw)
    assert policy.precision == precision and policy.compute_dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("hw", "says"),
    [
        (V100, ["compute capability 7.0", "8.0 or newer", "Use fp16"]),
        (amd("gfx906", (9, 0), "AMD Instinct MI50"), ["gfx906", "MI100 (gfx908)", "Use fp16"]),
        (mac(False), ["Apple MPS", "macOS 14", "torch 2.6", "use fp16"]),
        (ARC_FP16, ["Intel XPU", "has_bfloat16_conversions", "Use fp16"]),
    ],
)
def test_bf16_is_refused_where_the_device_lacks_it_and_says_how_to_fix(hw, says):
    with pytest.raises(UnsupportedPrecisionError) as info:
        resolve_precision("bf16", hardware=hw)
    message = str(info.value)
    assert message.startswith("precision: 'bf16'") and hw.name in message
    for words in says:
        assert words in message, (words, message)


@pytest.mark.parametrize("hw", [V100, A100, MI250X, MI300X, RX7900, mac(False), ARC_FP16])
def test_fp16_is_accepted_with_the_loss_scaler_on_every_gpu(hw):
    policy = resolve_precision("fp16", hardware=hw)
    assert policy.precision == "fp16" and policy.uses_scaler


def test_fp16_on_an_intel_gpu_without_fp16_is_refused():
    with pytest.raises(
        UnsupportedPrecisionError, match=r"\(has_fp16 is False\)\. Use bf16 or fp32"
    ):
        resolve_precision("fp16", hardware=intel(bf16=True, fp16=False))


def test_tf32_only_on_nvidia_ampere_and_newer():
    assert resolve_precision("fp32", hardware=A100).tf32 is True
    for hw in (V100, MI250X, MI300X, mac(True), MAX1550):
        assert resolve_precision("fp32", hardware=hw).tf32 is False
    with pytest.raises(UnsupportedPrecisionError, match="TF32"):
        resolve_precision("fp32", hardware=MI300X, tf32=True)


@pytest.mark.parametrize(
    ("arch", "family"),
    [
        ("gfx90a:sramecc+:xnack-", "MI200 (CDNA2)"),
        ("GFX942", "MI300 (CDNA3)"),
        ("gfx1151", "RDNA3 (Radeon RX 7000 / Radeon PRO W7000)"),
        ("gfx1201", "RDNA4 (Radeon RX 9000)"),
        ("gfx1030", "GCN5/RDNA1/RDNA2"),
    ],
)
def test_rocm_arch_ignores_feature_suffixes_and_case(arch, family):
    known = rocm_arch(arch)
    assert known is not None and known.family == family


def test_unknown_rocm_arch_follows_what_torch_reported():
    hw = HardwareInfo(
        device=torch.device("cuda", 0), name="Future AMD", cuda_capability=(13, 0),
        cuda_bf16=True, gpu_arch="gfx1300",
    )  # fmt: skip
    policy = resolve_precision("auto", hardware=hw)
    assert policy.precision == "bf16" and "no rule for this architecture" in policy.reason
    assert "compute capability" not in policy.reason
