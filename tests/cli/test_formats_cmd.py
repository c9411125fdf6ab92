import json

from click.testing import CliRunner

from ampkit import number_formats
from ampkit.cli import main


def test_formats_table():
    result = CliRunner().invoke(main, ["formats"])
    assert result.exit_code == 0
    assert "65504" in result.output and "fp8_e4m3" in result.output


def test_formats_json_matches_library():
    result = CliRunner().invoke(main, ["formats", "--json"])
    assert json.loads(result.output) == [f.to_dict() for f in number_formats()]
