"""An integration whose library is missing is a one-line MissingDependencyError naming the
extra; ``import ampkit.integrations`` itself needs none of the libraries."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from ampkit.errors import MissingDependencyError


@pytest.mark.parametrize(
    ("module", "library", "extra"),
    [
        ("ampkit.integrations.transformers", "transformers", "hf"),
        ("ampkit.integrations.lightning", "lightning.pytorch", "lightning"),
    ],
)
def test_missing_library_names_the_extra(monkeypatch, module, library, extra):
    monkeypatch.setitem(sys.modules, library, None)  # importing it now fails
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(MissingDependencyError, match=rf"pip install 'ampkit\[{extra}\]'") as err:
        importlib.import_module(module)
    assert "\n" not in str(err.value)


def test_the_package_imports_no_library():
    code = (
        "import sys, ampkit.integrations, ampkit.integrations.accelerate, ampkit.trainer.loggers; "
        "print(sorted(m for m in ('transformers', 'lightning', 'accelerate', 'mlflow', 'wandb') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_bad_arguments_are_refused():
    pytest.importorskip("transformers")
    from ampkit.errors import ConfigurationError
    from ampkit.integrations.transformers import AmpkitCallback

    with pytest.raises(ConfigurationError, match="doctor_on_start='yes' is invalid"):
        AmpkitCallback(doctor_on_start="yes")
    with pytest.raises(ConfigurationError, match="not a transformers.Trainer"):
        AmpkitCallback.attach(object())
