"""Make ``bench_models`` importable as a user module (``--model bench_models:tiny``)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def user_models(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    return "bench_models"
