"""Ray Train: ampkit's Trainer in 2 CPU workers of ``ray.train.torch.TorchTrainer`` reports its
checkpoints to Ray (``RayReport``); rank 1 dies once at step 5 after its checkpoint folder is
removed (a lost machine), Ray restarts the workers (``FailureConfig(max_failures=1)``), and
they resume from the checkpoint Ray restored (``resume_from_ray``): the final weights are
bitwise equal to an uninterrupted torchrun run of the same two processes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ampkit.errors import MissingDependencyError

WORKER = Path(__file__).with_name("ray_worker.py")
HAS_RAY = importlib.util.find_spec("ray") is not None


def env() -> dict[str, str]:
    # the Ray workers import ray_worker (and this checkout's ampkit) from PYTHONPATH
    paths = [str(WORKER.parent), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
    }


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(900)
@pytest.mark.skipif(not HAS_RAY, reason="Ray Train is not installed (pip install 'ampkit[ray]')")
def test_ray_restart_resumes_from_rays_checkpoint_bitwise(tmp_path):
    control = tmp_path / "control"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    done = subprocess.run(
        [*command, str(WORKER), str(control)],
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = tmp_path / "ray"
    done = subprocess.run(
        [sys.executable, str(WORKER), "--ray", str(out), "--fail"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=800,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert (out / "failed-once").exists()  # rank 1 did die once
    asked, resumed = (out / "resumed_from.txt").read_text().splitlines()
    # the local folder was gone, so the restarted workers resumed from Ray's copy
    assert Path(asked).parent == out / "ray/run" and Path(asked).name.startswith("step-")
    assert resumed == asked
    reported = sorted(p.name for p in (out / "ray/run").glob("step-*"))
    assert reported[-1] == "step-00000006"
    a, b = load_file(control / "final.safetensors"), load_file(out / "final.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_without_ray_the_bridge_says_which_extra_to_install(monkeypatch):
    from ampkit.integrations import ray as bridge

    monkeypatch.setitem(sys.modules, "ray.train", None)  # import ray.train now fails
    with pytest.raises(MissingDependencyError, match=r"pip install 'ampkit\[ray\]'"):
        bridge.RayReport()
    with pytest.raises(MissingDependencyError, match=r"pip install 'ampkit\[ray\]'"):
        bridge.resume_from_ray("ckpt")
