"""The repository's LICENSE is the license its package metadata declares."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_license_file_matches_the_metadata():
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert declared["license"] == "Apache-2.0"
    assert "Apache License" in text[:200] and "Version 2.0, January 2004" in text[:300]
    assert "END OF TERMS AND CONDITIONS" in text
