"""The peers' own test suites, run with ampkit substituted (a conformance run; not run by CI).

* ``pytorch PATH``: PyTorch's grad-scaling tests (``test/test_torch.py``, class
  ``TestTorchDeviceType``, from ``test_pickle_gradscaler`` to
  ``test_grad_scaler_deprecated_warning``, instantiated for the CPU), with every GradScaler
  spelling (``torch.GradScaler``, ``torch.amp.GradScaler``, ``torch.amp.grad_scaler.GradScaler``)
  replaced by ``ampkit.LossScaler``; the deprecated per-device spellings
  (``torch.cuda.amp.GradScaler``, ``torch.cpu.amp.GradScaler``) become what torch makes them, a
  subclass fixing the device that warns ``FutureWarning``, over ``LossScaler``.
* ``lightning PATH``: Lightning's precision-plugin tests (``tests/tests_pytorch/plugins/precision``:
  ``test_amp.py``, ``test_half.py``, ``test_all.py``), with ``AmpkitPrecision`` built wherever
  they (or the Trainer, for ``Trainer(precision=...)``) build ``MixedPrecision("16-mixed" |
  "bf16-mixed")`` or ``HalfPrecision("bf16-true")``. Precisions ampkit's plugin has no
  counterpart for (``16-true``, ``64-true``, DeepSpeed, FSDP) keep Lightning's own class, and
  their tests are reported as such.

PATH is a checkout (or, for PyTorch, the test file itself). The peers' files are read where
they are; the substitution is a pytest plugin generated in a temporary folder, so no peer code
enters this repository. ``--reference`` runs the same selection without the substitution (the
peers' own classes). Prints one line per test (result, and the first line of a failure) and
the counts; ``private`` marks PyTorch tests that read GradScaler's private attributes
(``_scale``, ``_unscale_grads_``, ...), ``no scaler`` those that never build one.

    python benchmarks/peer_suites.py pytorch ~/src/pytorch            # ~1 minute on 2 cores
    python benchmarks/peer_suites.py lightning ~/src/pytorch-lightning --reference

PyTorch's test helpers (``torch.testing._internal``) come with the torch wheel; they import
``expecttest``, which is replaced by a one-class stand-in when it is not installed.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

FIRST, LAST = "test_pickle_gradscaler", "test_grad_scaler_deprecated_warning"
LIGHTNING_FILES = ("test_amp.py", "test_half.py", "test_all.py")

TORCH_PLUGIN = """
import warnings

import torch

from ampkit import LossScaler


def _deprecated_alias(device):
    class GradScaler(LossScaler):
        def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                     growth_interval=2000, enabled=True):
            warnings.warn(
                f"`torch.{device}.amp.GradScaler(args...)` is deprecated. Please use "
                f"`torch.amp.GradScaler('{device}', args...)` instead.",
                FutureWarning,
                stacklevel=2,
            )
            super().__init__(device, init_scale, growth_factor, backoff_factor,
                             growth_interval, enabled)

    return GradScaler


torch.GradScaler = torch.amp.GradScaler = torch.amp.grad_scaler.GradScaler = LossScaler
torch.cuda.amp.GradScaler = torch.cuda.amp.grad_scaler.GradScaler = _deprecated_alias("cuda")
torch.cpu.amp.GradScaler = torch.cpu.amp.grad_scaler.GradScaler = _deprecated_alias("cpu")
"""

LIGHTNING_PLUGIN = """
import json
import os

import lightning.pytorch.plugins as plugins
import lightning.pytorch.plugins.precision as precision
import lightning.pytorch.trainer.connectors.accelerator_connector as connector

from ampkit.integrations.lightning import AmpkitPrecision

_OWN_MIXED, _OWN_HALF = plugins.MixedPrecision, plugins.HalfPrecision
_NAMES = {"16-mixed": "fp16", "bf16-mixed": "bf16", "bf16-true": "bf16-true"}


def _record():
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    with open(os.environ["AMPKIT_SUBSTITUTED"], "a") as out:
        out.write(json.dumps(test) + "\\n")


def MixedPrecision(precision, device, scaler=None):
    _record()
    plugin = AmpkitPrecision(_NAMES[precision], device)
    if scaler is not None:
        plugin.scaler = scaler
    return plugin


def HalfPrecision(precision="16-true"):
    if precision not in _NAMES:
        return _OWN_HALF(precision)  # no ampkit counterpart: Lightning's own
    _record()
    return AmpkitPrecision(_NAMES[precision])


for module in (plugins, precision, connector):
    module.MixedPrecision, module.HalfPrecision = MixedPrecision, HalfPrecision
"""

EXPECTTEST_STANDIN = "import unittest\n\n\nclass TestCase(unittest.TestCase):\n    pass\n"


@dataclass
class Outcome:
    name: str
    kind: str
    result: str
    detail: str = ""


def _methods(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "TestTorchDeviceType":
            return {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
    raise SystemExit("peer_suites: no class TestTorchDeviceType in the file")


def _names_used(fn: ast.FunctionDef, methods: dict[str, ast.FunctionDef]) -> set[str]:
    """Attribute and variable names in ``fn`` and in the ``self._helpers`` it calls."""
    seen, todo, names = set(), [fn], set()
    while todo:
        node = todo.pop()
        if node.name in seen:
            continue
        seen.add(node.name)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute):
                names.add(sub.attr)
                helper = methods.get(sub.attr)
                if isinstance(sub.value, ast.Name) and sub.value.id == "self" and helper:
                    todo.append(helper)
            elif isinstance(sub, ast.Name):
                names.add(sub.id)
    return names


def pytorch_selection(path: Path) -> dict[str, str]:
    """The tests from FIRST to LAST, each with its kind: public, private or no scaler."""
    import torch

    methods = _methods(ast.parse(path.read_text()))
    order = list(methods)
    if FIRST not in methods or LAST not in methods:
        raise SystemExit(f"peer_suites: {path} lacks {FIRST} or {LAST}")
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(torch.ones(()))
    private = {n for n in (*vars(scaler), *dir(type(scaler))) if n.startswith("_")}
    private -= {n for n in private if n.startswith("__")}
    kinds = {}
    for name in order[order.index(FIRST) : order.index(LAST) + 1]:
        if not name.startswith("test_"):
            continue
        used = _names_used(methods[name], methods)
        if "GradScaler" not in used:
            kinds[name] = "no scaler"
        elif used & private:
            kinds[name] = "private: " + ", ".join(sorted(used & private))
        else:
            kinds[name] = "public"
    return kinds


def _run_pytest(args: list[str], cwd: Path, env: dict[str, str], xml: Path) -> dict[str, Outcome]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    subprocess.run([*cmd, *args], cwd=cwd, env=env, check=False, capture_output=True)
    if not xml.exists():
        raise SystemExit("peer_suites: pytest wrote no report (collection failed?)")
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name", "")
        result, detail = "pass", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                result = {"failure": "FAIL", "error": "ERROR", "skipped": "skip"}[tag]
                text = (found.get("message") or found.text or "").strip()
                detail = text.splitlines()[0][:150] if text else ""
                break
        outcomes[f"{case.get('classname', '')}::{name}"] = Outcome(name, "", result, detail)
    return outcomes


def _environment(tmp: Path, plugin: str | None) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(tmp)]
    if plugin is not None:
        (tmp / "ampkit_substitution.py").write_text(plugin)
    if importlib.util.find_spec("expecttest") is None:
        (tmp / "expecttest.py").write_text(EXPECTTEST_STANDIN)
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    return env


def run_pytorch(path: Path, reference: bool) -> list[Outcome]:
    test_file = path if path.is_file() else path / "test" / "test_torch.py"
    kinds = pytorch_selection(test_file)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = _environment(tmp, None if reference else TORCH_PLUGIN)
        plugin = [] if reference else ["-p", "ampkit_substitution"]
        selected = " or ".join(kinds)
        args = [*plugin, str(test_file), "-k", f"TestTorchDeviceTypeCPU and ({selected})"]
        outcomes = _run_pytest(args, tmp, env, tmp / "report.xml")
    rows = []
    for outcome in outcomes.values():
        base = max((k for k in kinds if outcome.name.startswith(k)), key=len)
        outcome.kind = kinds[base]
        rows.append(outcome)
    return rows


def run_lightning(path: Path, reference: bool) -> list[Outcome]:
    tests = path / "tests"
    files = [f"tests_pytorch/plugins/precision/{name}" for name in LIGHTNING_FILES]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = _environment(tmp, LIGHTNING_PLUGIN)
        record = tmp / "substituted.jsonl"
        record.touch()
        env["AMPKIT_SUBSTITUTED"] = str(record)
        plugin = ["-p", "ampkit_substitution"]
        if reference:  # the same selection, Lightning's own classes (counted, not replaced)
            (tmp / "ampkit_substitution.py").write_text(_reference_plugin())
        outcomes = _run_pytest([*plugin, *files], tests, env, tmp / "report.xml")
        substituted = {json.loads(line) for line in record.read_text().splitlines()}
    rows = []
    for key, outcome in outcomes.items():
        module, _, name = key.partition("::")
        nodeid = f"{module.replace('.', '/')}.py::{name}"
        outcome.kind = "counterpart" if nodeid in substituted else "no counterpart"
        rows.append(outcome)
    return rows


def _reference_plugin() -> str:
    """Record which tests would get an ampkit plugin, without substituting it."""
    head, _, _ = LIGHTNING_PLUGIN.partition("def MixedPrecision")
    return (
        head
        + """
def MixedPrecision(precision, device, scaler=None):
    _record()
    return _OWN_MIXED(precision, device, scaler)


def HalfPrecision(precision="16-true"):
    if precision in _NAMES:
        _record()
    return _OWN_HALF(precision)


for module in (plugins, precision, connector):
    module.MixedPrecision, module.HalfPrecision = MixedPrecision, HalfPrecision
"""
    )


def report(suite: str, rows: list[Outcome], reference: bool) -> None:
    label = "reference (the peer's own classes)" if reference else "ampkit substituted"
    print(f"{suite}: {label}")
    width = max(len(r.name) for r in rows)
    for row in sorted(rows, key=lambda r: r.name):
        detail = f"  {row.detail}" if row.result != "pass" and row.detail else ""
        print(f"  {row.result:5} {row.name:{width}}  [{row.kind}]{detail}")
    groups: dict[str, list[Outcome]] = {}
    for row in rows:
        groups.setdefault(row.kind.split(":")[0], []).append(row)
    for kind, members in sorted(groups.items()):
        passed = sum(r.result == "pass" for r in members)
        print(f"  {kind}: {passed}/{len(members)} pass")
    print(f"  all: {sum(r.result == 'pass' for r in rows)}/{len(rows)} pass")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", choices=("pytorch", "lightning"))
    parser.add_argument("path", type=Path, help="the peer's checkout (or test_torch.py)")
    parser.add_argument("--reference", action="store_true", help="run without substitution")
    args = parser.parse_args()
    if not args.path.exists():
        raise SystemExit(f"peer_suites: {args.path} does not exist")
    if args.suite == "pytorch":
        rows = run_pytorch(args.path.resolve(), args.reference)
    else:
        rows = run_lightning(args.path.resolve(), args.reference)
    if not rows:
        raise SystemExit("peer_suites: no test ran")
    report(args.suite, rows, args.reference)


if __name__ == "__main__":
    main()
