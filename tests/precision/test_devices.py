import random
import resource
import sys

import numpy as np
import pytest
import torch

from ampkit import ConfigurationError
from ampkit.precision import devices
from ampkit.precision._kernels import unscale_and_check_, unscale_plain_
from ampkit.precision.policy import resolve_device
from ampkit.trainer.checkpointing.rng import get_rng_state, set_rng_state

CPU = torch.device("cpu")


def test_cpu_is_always_available_and_counts_one():
    assert devices.is_available("cpu") and devices.device_count("cpu") == 1
    assert not devices.is_available("tpu") and devices.device_count("tpu") == 0


def test_default_device_is_the_first_available_accelerator_else_cpu():
    expected = next((kind for kind in ("cuda", "xpu", "mps") if devices.is_available(kind)), "cpu")
    assert devices.default_device().type == expected
    assert resolve_device(None) == devices.default_device()


@pytest.mark.parametrize("kind", ["cuda", "xpu", "mps"])
def test_absent_backend_is_refused_in_one_line_that_says_why_and_what_to_use(kind):
    if devices.is_available(kind):
        pytest.skip(f"{kind} is available here")
    for spelled in (kind, f"{kind}:0"):
        with pytest.raises(ConfigurationError) as info:
            resolve_device(spelled)
        message = str(info.value)
        assert message.startswith(f"device: {spelled!r} was requested, but ")
        assert devices.unavailable_reason(kind) in message
        assert "Use a device this machine has: 'cpu'" in message
        assert "\n" not in message


def test_not_a_device_name_lists_the_accepted_names():
    with pytest.raises(ConfigurationError, match="'mps' or 'xpu'/'xpu:N'"):
        resolve_device("tpu:0:0")


def test_cpu_synchronize_and_peak_memory_window_are_harmless():
    devices.synchronize(CPU)
    devices.reset_peak_memory(CPU)
    assert not devices.has_peak_memory_counter(CPU)
    assert devices.memory_allocated(CPU) is None
    value, kind = devices.peak_memory(CPU)
    scale = 1 if sys.platform == "darwin" else 1024
    assert kind == "process peak RSS"
    assert value == resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def test_metrics_keeps_exporting_the_moved_peak_memory_functions():
    from ampkit.trainer import metrics

    assert metrics.peak_memory is devices.peak_memory
    assert metrics.reset_peak_memory is devices.reset_peak_memory


@pytest.mark.parametrize(
    ("kind", "backend"),
    [("cuda", "nccl"), ("cpu", "gloo"), ("mps", "gloo"), ("meta", "gloo")],
)
def test_distributed_backend_per_device_type(kind, backend):
    assert devices.distributed_backend(kind) == backend


def test_xpu_uses_xccl_only_where_torch_has_it():
    check = getattr(torch.distributed, "is_xccl_available", None)
    expected = "xccl" if check is not None and check() else "gloo"
    assert devices.distributed_backend("xpu") == expected


@pytest.mark.parametrize(
    ("device", "autocast", "ids", "pinned", "workers"),
    [
        (torch.device("cuda", 1), "cuda", [3], True, 4),
        (torch.device("xpu", 0), "xpu", [3], False, 4),
        (torch.device("mps"), "mps", None, False, 4),
        (CPU, "cpu", None, False, 0),
    ],
)
def test_per_device_defaults(device, autocast, ids, pinned, workers):
    assert devices.autocast_device_type(device) == autocast
    assert devices.ddp_device_ids(device, 3) == ids
    assert devices.loader_defaults(device, cpus=16) == (pinned, workers)
    assert devices.loader_defaults(device, cpus=2) == (pinned, 1 if workers else 0)


def test_collective_device_is_the_cpu_for_gloo():
    assert devices.collective_device("gloo") == CPU


def test_fused_unscale_everywhere_but_old_or_low_precision_mps():
    assert devices.fused_unscale_supported(CPU, torch.float16)
    assert devices.fused_unscale_supported(torch.device("cuda"), torch.bfloat16)
    assert not devices.fused_unscale_supported(torch.device("mps"), torch.float16)
    numbers = torch.__version__.split("+")[0].split(".")
    recent = (int(numbers[0]), int(numbers[1])) >= (2, 8)
    assert devices.fused_unscale_supported(torch.device("mps"), torch.float32) is recent


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("bad", [None, float("inf"), float("nan")])
def test_plain_unscale_matches_the_fused_kernel_bitwise(dtype, bad):
    torch.manual_seed(0)
    grads = [torch.randn(17, dtype=dtype) * 100, torch.randn(3, 5, dtype=dtype)]
    if bad is not None:
        grads[1][2, 3] = bad
    fused = [g.clone() for g in grads]
    plain = [g.clone() for g in grads]
    inv = torch.full((), 1 / 1024, dtype=torch.float32)
    flag_fused, flag_plain = torch.zeros(()), torch.zeros(())
    torch._amp_foreach_non_finite_check_and_unscale_(fused, flag_fused, inv)
    unscale_plain_(plain, flag_plain, inv)
    assert flag_plain.item() == flag_fused.item() == (0.0 if bad is None else 1.0)
    for a, b in zip(plain, fused, strict=True):
        assert torch.equal(a.nan_to_num(), b.nan_to_num())


def test_unscale_and_check_is_unchanged_on_cpu():
    param = torch.nn.Parameter(torch.ones(4))
    param.grad = torch.full((4,), 8.0)
    found = unscale_and_check_([param], 0.125)
    assert torch.equal(param.grad, torch.ones(4)) and found[CPU].item() == 0.0


def test_fork_rng_restores_the_cpu_stream():
    torch.manual_seed(3)
    with devices.fork_rng(CPU):
        torch.rand(5)
    after = torch.rand(5)
    torch.manual_seed(3)
    assert torch.equal(after, torch.rand(5))


def test_device_rng_states_hold_only_backends_in_use():
    states = devices.device_rng_states()
    assert set(states) <= {"cuda", "xpu", "mps"}
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        assert "cuda" not in states
    devices.set_device_rng_states({})  # nothing saved: nothing restored, no error


def test_checkpoint_rng_round_trip_still_restores_every_cpu_stream():
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    state = get_rng_state()
    first = (random.random(), float(np.random.rand()), torch.rand(3))
    set_rng_state(state)
    again = (random.random(), float(np.random.rand()), torch.rand(3))
    assert first[:2] == again[:2] and torch.equal(first[2], again[2])
