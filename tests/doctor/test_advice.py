"""The doctor advises only precisions the device runs well (the facts ``auto`` decides by), and
calls fp16 on a CPU slow; the numerics of what it would have advised stay in the reasons."""

from __future__ import annotations

import pytest
import torch
from doctor_models import cancellation, healthy, overflowing

import ampkit
from ampkit.doctor.advice import runs_well, slow_here
from ampkit.precision.hardware import HardwareInfo, probe
from ampkit.precision.policy import resolve_precision

CPU_BF16 = HardwareInfo(device=torch.device("cpu"), name="Test EPYC", cpu_native_bf16=True)
CPU_AVX2 = HardwareInfo(device=torch.device("cpu"), name="Test AVX2", cpu_native_bf16=False)
AMPERE = HardwareInfo(
    device=torch.device("cuda", 0), name="Test A100", cuda_capability=(8, 0), cuda_bf16=True
)
VOLTA = HardwareInfo(
    device=torch.device("cuda", 0), name="Test V100", cuda_capability=(7, 0), cuda_bf16=False
)
PASCAL = HardwareInfo(
    device=torch.device("cuda", 0), name="Test P100", cuda_capability=(6, 0), cuda_bf16=False
)
MPS = HardwareInfo(device=torch.device("mps"), name="Test M2", mps_bf16=True)
XPU = HardwareInfo(device=torch.device("xpu", 0), name="Test Arc", xpu_bf16=True, xpu_fp16=True)


@pytest.mark.parametrize(
    ("hardware", "expected"),
    [
        (CPU_BF16, ("bf16", "fp32")),  # never fp16 on a CPU
        (CPU_AVX2, ("fp32",)),  # emulated low precision is slower than fp32
        (AMPERE, ("bf16", "fp16", "fp32")),
        (VOLTA, ("fp16", "fp32")),
        (PASCAL, ("fp32",)),  # no tensor cores
        (MPS, ("fp16", "fp32")),
        (XPU, ("bf16", "fp16", "fp32")),
    ],
    ids=["cpu-bf16", "cpu-avx2", "ampere", "volta", "pascal", "mps", "xpu"],
)
def test_what_runs_well_starts_with_autos_pick(hardware, expected):
    assert runs_well(hardware) == expected
    assert expected[0] == resolve_precision("auto", hardware.device, hardware=hardware).precision


def test_on_this_machine_auto_leads_and_fp16_is_never_advised_on_the_cpu():
    hardware = probe(torch.device("cpu"))
    well = runs_well(hardware)
    assert well[0] == resolve_precision("auto", "cpu").precision and well[-1] == "fp32"
    assert "fp16" not in well
    assert ("bf16" in well) is bool(hardware.cpu_native_bf16)


def reasons(report: ampkit.NumericsReport) -> str:
    return " ".join(report.recommendation.reasons)


def test_clean_fp16_on_a_cpu_with_native_bf16_is_advised_as_bf16_and_called_slow():
    model, closure = healthy()
    report = ampkit.diagnose(model, closure, "fp16", steps=1, hardware=CPU_BF16)
    rec = report.recommendation
    assert (rec.precision, rec.init_scale, rec.keep_fp32) == ("bf16", None, ())
    assert "fp16 is clean for this model" in reasons(report)  # what the numerics allow
    assert "fp16 on a CPU is slow" in reasons(report) and "60x slower" in reasons(report)
    assert "bf16 well" in reasons(report)


def test_fp16_on_a_cpu_without_native_bf16_is_advised_as_fp32():
    model, closure = healthy()
    report = ampkit.diagnose(model, closure, "fp16", steps=1, hardware=CPU_AVX2)
    rec = report.recommendation
    assert (rec.precision, rec.init_scale, rec.keep_fp32) == ("fp32", None, ())
    assert "fp16 on a CPU is slow" in reasons(report) and "train in fp32" in reasons(report)


def test_bf16_on_a_cpu_without_native_bf16_is_advised_as_fp32_with_autos_reason():
    model, closure = healthy()
    report = ampkit.diagnose(model, closure, "bf16", steps=1, hardware=CPU_AVX2)
    assert report.recommendation.precision == "fp32"
    assert "bf16 is clean for this model" in reasons(report)
    assert "bf16 is not fast on this device" in reasons(report)
    assert "no native bf16" in reasons(report)  # auto's own reason for picking fp32


def test_overflow_in_fp16_on_a_cpu_without_native_bf16_is_fp32_not_bf16():
    model, closure = overflowing()
    report = ampkit.diagnose(model, closure, "fp16", steps=1, hardware=CPU_AVX2)
    assert report.recommendation.precision == "fp32"
    assert "fp16 fails in mid" in reasons(report)


def test_precision_loss_in_fp16_on_a_cpu_keeps_the_islands_bf16_itself_needs():
    model, closure = cancellation()
    report = ampkit.diagnose(model, closure, "fp16", steps=1, hardware=CPU_BF16)
    # control: the doctor's own bf16 diagnosis of the same model, on a device that runs bf16
    control = ampkit.diagnose(*cancellation(), "bf16", steps=1, hardware=AMPERE)
    rec = report.recommendation
    assert rec.precision == "bf16" and control.recommendation.precision == "bf16"
    assert rec.keep_fp32 == control.recommendation.keep_fp32


def test_a_precision_the_device_runs_well_is_advised_unchanged():
    model, closure = healthy()
    gpu = ampkit.diagnose(model, closure, "fp16", steps=1, hardware=AMPERE).recommendation
    assert gpu.precision == "fp16" and gpu.init_scale is not None
    assert "slow" not in " ".join(gpu.reasons)


def test_this_machines_advice_follows_its_probe():
    model, closure = healthy()
    report = ampkit.diagnose(model, closure, "fp16", steps=1)  # hardware probed
    assert report.recommendation.precision == runs_well(probe(torch.device("cpu")))[0]
    assert "fp16 on a CPU is slow" in reasons(report)


def test_slow_here_names_the_reason():
    assert slow_here("fp16", CPU_BF16).startswith("fp16 on a CPU is slow")
    assert "no tensor cores" in slow_here("fp16", PASCAL)
