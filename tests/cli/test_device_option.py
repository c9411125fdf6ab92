"""Every command takes ``--device``; a backend this machine lacks is one line and exit 2."""

import pytest
import torch
from click.testing import CliRunner

from ampkit.cli import main
from ampkit.precision import devices

ABSENT = [kind for kind in ("mps", "xpu", "cuda") if not devices.is_available(kind)]


def _one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("ampkit: error:")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.skipif(not ABSENT, reason="every backend is available here")
@pytest.mark.parametrize("command", ["train", "bench", "doctor", "export"])
def test_an_absent_backend_is_one_line_with_the_reason_and_what_to_use(command, tmp_path):
    kind = ABSENT[0]
    extra = ["--out", str(tmp_path / "m.onnx")] if command == "export" else []
    result = CliRunner().invoke(main, [command, "--device", kind, *extra])
    line = _one_error_line(result)
    assert f"{kind!r} was requested" in line
    assert devices.unavailable_reason(kind) in line
    assert "Use a device this machine has: 'cpu'" in line


@pytest.mark.parametrize("command", ["train", "bench", "doctor", "export"])
def test_every_command_lists_the_device_option(command):
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0 and "--device" in result.output


def test_export_refuses_a_gpu_with_the_reason(tmp_path):
    if not any(devices.is_available(kind) for kind in ("cuda", "xpu", "mps")):
        pytest.skip("no GPU here: the refusal is the absent-backend one")
    gpu = devices.default_device()
    result = CliRunner().invoke(
        main, ["export", "--device", str(gpu), "--out", str(tmp_path / "m.onnx")]
    )
    assert "traces the model and checks parity on the CPU" in _one_error_line(result)


def test_doctor_runs_on_the_cpu_device(tmp_path):
    result = CliRunner().invoke(
        main,
        ["doctor", "--device", "cpu", "--steps", "1", "--findings-only", "--precision", "bf16"],
    )
    assert result.exit_code == 0, result.output


def test_predict_takes_the_device_and_refuses_an_absent_backend():
    import ampkit
    from ampkit import ConfigurationError

    model = torch.nn.Linear(3, 2)
    out = ampkit.predict(model, torch.ones(1, 3), precision="fp32", device="cpu")
    assert out.dtype == torch.float32 and out.shape == (1, 2)
    if ABSENT:
        with pytest.raises(ConfigurationError, match=f"device: '{ABSENT[0]}' was requested"):
            ampkit.predict(model, torch.ones(1, 3), device=ABSENT[0])
