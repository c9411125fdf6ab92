"""The search AMP010 uses for an iteration that runs no ``scaler.update()``."""

from ampkit.lint.rules.steps import _skipping_path


def test_if_else_both_updating_leaves_no_skipping_iteration() -> None:
    # ``if log: update()`` / ``else: update()``
    assert _skipping_path([[("log", 1)], [("log", 0)]]) is None


def test_one_guarded_update_is_skipped_when_its_guard_is_false() -> None:
    assert _skipping_path([[("every_n", 1)]]) == ("every_n", 1)


def test_the_guard_named_is_the_chosen_update_s() -> None:
    # a fresh scaler on the NaN arm (update 0) and the update under the counter and the
    # non-NaN arm (update 1): skipping both means no NaN and a counter not come round
    options = [[("nan", 1)], [("every_n", 1), ("nan", 0)]]
    assert _skipping_path(options, name=1) == ("every_n", 1)


def test_nan_arm_replacing_the_scaler_covers_the_only_update() -> None:
    # update under ``not nan``, fresh scaler under ``nan``: every iteration does one
    assert _skipping_path([[("nan", 0)], [("nan", 1)]]) is None


def test_a_search_over_budget_reports_nothing() -> None:
    options = [[("a", 1)], [("b", 1)]]
    assert _skipping_path(options) == ("a", 1)
    # two steps needed, one allowed: the search gives up, and giving up reports nothing
    assert _skipping_path(options, budget=1) is None
