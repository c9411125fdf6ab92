"""A precision mode's ``ampkit train`` options are declared by the mode (``cli_options``) and
held in ``TrainConfig.mode_options``; the table, the checks and the records are made from the
declarations, and the earlier keyword form still works with a DeprecationWarning."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import pytest

from ampkit.errors import ConfigurationError
from ampkit.job.config import TrainConfig, settings
from ampkit.job.resume import FREE, check_resume_config, run_record
from ampkit.precision.modes import ModeOption, PrecisionMode, register_mode, unregister_mode
from ampkit.precision.spelling import PrecisionFacts


def _rows() -> dict[str, Any]:
    return {row.name: row for row in settings()}


def test_each_declared_option_is_a_row_of_the_table():
    from ampkit.precision.modes import Bf16True

    rows = _rows()
    for option in Bf16True.cli_options:
        row = rows[option.name]
        assert row.mode_option and row.option == "--" + option.name.replace("_", "-")
        assert row.choices == option.choices and row.unset_means == option.default
        assert row.help.startswith("bf16-true only: ") and row.default is None
    assert "mode_options" not in rows  # the field holding them is no row itself


def test_the_old_keyword_warns_with_the_new_form_and_builds_the_same_config():
    new = TrainConfig(precision="bf16-true", mode_options={"update_compensation": "stochastic"})
    with pytest.warns(DeprecationWarning, match=r"mode_options=\{'update_compensation': \.\.\.\}"):
        old = TrainConfig(precision="bf16-true", update_compensation="stochastic")
    assert old == new and old.update_compensation == "stochastic"
    assert old.mode_options == {"update_compensation": "stochastic"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        unset = TrainConfig(update_compensation=None)  # None is unset: nothing moved, no warning
    assert unset.mode_options == {} and unset.update_compensation is None


def test_the_record_keeps_one_key_per_option():
    record = TrainConfig(mode_options={"state_precision": "bf16"}).to_dict()
    assert "mode_options" not in record
    assert record["state_precision"] == "bf16" and record["update_compensation"] is None
    assert TrainConfig.from_settings(record) == TrainConfig(
        mode_options={"state_precision": "bf16"}
    )


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"state_precision": 16}, "--state-precision must be a string, got 16"),
        ({"stat_precision": "bf16"}, "'stat_precision' is not an option of a precision mode"),
        (
            {"update_compensation": "kahan"},
            "--update-compensation applies to --precision bf16-true",
        ),
    ],
)
def test_a_bad_mode_option_is_named_as_its_flag(options, problem):
    with pytest.raises(ConfigurationError, match="invalid settings") as caught:
        TrainConfig(precision="bf16", mode_options=options).validate()
    assert problem in str(caught.value)


class _Knob(PrecisionMode):
    """A registered mode with an option of its own, offered to ``ampkit train``."""

    precision_facts: ClassVar[tuple[PrecisionFacts, ...]] = (
        PrecisionFacts("toy-knob", compute_dtype="float32"),
    )
    cli_options: ClassVar[tuple[ModeOption, ...]] = (
        ModeOption("toy_knob_level", int, "how far to turn the knob.", default=3),
    )

    def __init__(self, *, toy_knob_level: int = 3) -> None:
        super().__init__("toy-knob")
        self.level = toy_knob_level


@pytest.fixture
def knob():
    register_mode(_Knob)
    try:
        yield _Knob
    finally:
        unregister_mode("toy-knob")


def test_a_registered_mode_s_option_becomes_a_setting_checked_and_compared(knob):
    row = _rows()["toy_knob_level"]
    assert (row.option, row.type, row.help) == (
        "--toy-knob-level",
        int,
        "toy-knob only: how far to turn the knob. [default: 3]",
    )
    TrainConfig(precision="toy-knob", mode_options={"toy_knob_level": 5}).validate()
    with pytest.raises(ConfigurationError, match="--toy-knob-level must be an integer"):
        TrainConfig(precision="toy-knob", mode_options={"toy_knob_level": 1.5}).validate()
    with pytest.raises(ConfigurationError, match="applies to --precision toy-knob only"):
        TrainConfig(precision="fp32", mode_options={"toy_knob_level": 5}).validate()
    saved = run_record(TrainConfig(precision="toy-knob", mode_options={"toy_knob_level": 5}), "x")
    assert saved["toy_knob_level"] == 5 and "toy_knob_level" not in FREE

    def resume(options: dict[str, int]) -> list[str]:
        return check_resume_config(
            saved,
            TrainConfig(precision="toy-knob", mode_options=options),
            data_sha256="x",
            precision="toy-knob",
            saved_precision="toy-knob",
            checkpoint="ck",
        )

    assert resume({"toy_knob_level": 5}) == []
    with pytest.raises(ConfigurationError, match=r"--toy-knob-level 5 \(now 3\)"):
        resume({"toy_knob_level": 3})


def test_a_config_stays_hashable_with_its_mode_options():
    a = TrainConfig(mode_options={"state_precision": "bf16", "update_compensation": "none"})
    b = TrainConfig(mode_options={"update_compensation": "none", "state_precision": "bf16"})
    assert a == b and hash(a) == hash(b) and len({a, b, TrainConfig()}) == 2
