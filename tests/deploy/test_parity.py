"""The parity verdict in closed form: what passes, and a non-finite reference that never does."""

from __future__ import annotations

import numpy as np

from ampkit.deploy.parity import Tolerance, compare

TOL = Tolerance(rel=1e-2, top1=0.99)


def _one(reference: np.ndarray, actual: np.ndarray):
    report = compare(["logits"], [[reference]], [[actual]], TOL, "test")
    (row,) = report.outputs
    return report, row


def test_agreeing_outputs_pass_with_the_closed_form_errors():
    reference = np.array([[1.0, 4.0], [2.0, -8.0]], dtype=np.float32)
    actual = reference + np.array([[0.0, 0.04], [0.0, 0.0]], dtype=np.float32)
    report, row = _one(reference, actual)
    assert row.passed and report.passed
    assert np.isclose(row.max_abs, 0.04) and np.isclose(row.max_rel, 0.04 / 8)
    assert row.top1 == 1.0 and row.nonfinite == 0 and row.reference_nonfinite == 0


def test_a_reference_that_is_nan_everywhere_fails():
    nan = np.full((2, 3), np.nan, dtype=np.float32)
    report, row = _one(nan, nan.copy())  # before: max abs 0, max rel 0, "ok"
    assert not row.passed and not report.passed
    assert row.reference_nonfinite == 6 and row.nonfinite == 0
    text = report.to_text()
    assert "0 (fp32 6)" in text and "FAIL" in text


def test_a_reference_with_one_inf_fails_even_where_the_rest_agrees():
    reference = np.array([[1.0, np.inf], [2.0, 3.0]], dtype=np.float32)
    report, row = _one(reference, reference.copy())
    assert not row.passed and row.reference_nonfinite == 1 and row.max_abs == 0.0


def test_new_non_finite_values_fail_and_are_counted():
    reference = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    actual = reference.copy()
    actual[0, 0] = np.nan
    _, row = _one(reference, actual)
    assert not row.passed and row.nonfinite == 1 and row.reference_nonfinite == 0


def test_tiny_margin_disagreements_pass_on_the_decisive_criterion():
    # random-weight logits: every row a near-tie the rounding error (1e-3) swaps
    reference = np.array([[1.0, 1.0005, -2.0], [0.3, 0.3002, 0.1], [5.0, -1.0, 0.0]])
    actual = reference + np.array([[1e-3, -1e-3, 0.0], [1e-3, 0.0, 0.0], [1e-3, 0.0, 0.0]])
    _, row = _one(reference.astype(np.float32), actual.astype(np.float32))
    assert row.top1 == 1 / 3  # plain top-1: two of three rows flipped
    assert row.decisive == 1 and row.decisive_top1 == 1.0  # only the third row is decisive
    assert row.passed and row.failures == ()


def test_a_large_margin_disagreement_fails_and_names_the_criterion():
    # four rows off by rounding (1e-3, which also sets the scale); one with margin 3 whose
    # two best classes swap through an error of 1.6: far inside max rel, a real disagreement
    reference = np.array([[3.0, 0.0, 0.0]] + [[1000.0, 0.0, 0.0]] * 4, dtype=np.float32)
    actual = reference + np.float32(1e-3) * np.array([[0, 0, 0]] + [[1, -1, 0]] * 4)
    actual[0] = [1.4, 1.6, 0.0]
    report, row = _one(reference, actual.astype(np.float32))
    assert np.isclose(row.max_rel, 1.6 / 1000) and row.max_rel <= TOL.rel
    assert row.decisive == 5 and row.decisive_top1 == 0.8 and not row.passed
    (failure,) = row.failures
    assert failure.startswith("decisive top-1 80.00% < 99% (1 of 5 positions whose fp32 margin")
    assert "failed: logits: decisive top-1 80.00%" in report.to_text()


def test_max_rel_failure_is_named_with_its_figures():
    reference = np.array([[1.0, 4.0], [2.0, -8.0]], dtype=np.float32)
    _, row = _one(reference, reference + np.float32(0.5))
    assert row.failures == ("max rel 0.0625 > 0.01",)


def test_padded_positions_are_not_compared_but_are_checked_for_nan():
    reference = np.zeros((2, 3, 4), dtype=np.float32)
    reference[..., 0] = 1.0
    mask = np.array([[True, True, False], [False, True, True]])
    garbage = reference.copy()
    garbage[0, 2] = [0.0, 9.0, 0.0, 0.0]  # a pad position: undefined, not compared
    report = compare(["logits"], [[reference]], [[garbage]], TOL, "test", (), [[mask]])
    (row,) = report.outputs
    assert row.passed and row.max_abs == 0.0 and (row.compared, row.positions) == (4, 6)
    assert "2 of 6 positions are padding" in report.to_text()
    garbage[1, 0, 2] = np.nan  # NaN at a pad position reaches real ones in the next layer
    (row,) = compare(["logits"], [[reference]], [[garbage]], TOL, "test", (), [[mask]]).outputs
    assert not row.passed and row.nonfinite == 1 and row.failures == ("1 new inf/NaN",)
