"""The public API: explicit, lazily imported, complete."""

import subprocess
import sys

import ampkit


def test_all_names_resolve_and_match_the_export_table():
    assert sorted(ampkit.__all__) == sorted(ampkit._EXPORTS)
    for name in ampkit.__all__:
        assert getattr(ampkit, name) is not None, name


def test_unknown_attribute_raises_attribute_error():
    try:
        ampkit.does_not_exist  # noqa: B018
    except AttributeError as exc:
        assert "does_not_exist" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_cli_and_linter_import_without_torch():
    code = (
        "import sys, ampkit, ampkit.cli, ampkit.lint; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_package_is_typed():
    from importlib.resources import files

    assert files("ampkit").joinpath("py.typed").is_file()
