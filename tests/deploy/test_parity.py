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
