"""The convergence verdict on runs whose noise is known: seed sets, single runs, short runs."""

from __future__ import annotations

import math

import numpy as np
from report_runs import noisy_curve, write_run

from ampkit.runs import report


def _seed_set(tmp_path, name, offsets, *, shift=0.0, precision="fp32", noise=0.0):
    return [
        write_run(
            tmp_path / f"{name}-s{seed}",
            noisy_curve(seed, shift=shift + offset, noise=noise),
            precision=precision,
            seed=seed,
        )
        for seed, offset in enumerate(offsets)
    ]


def test_runs_that_differ_only_in_seed_form_one_set(tmp_path):
    runs = _seed_set(tmp_path, "fp32", [0, 0, 0]) + _seed_set(
        tmp_path, "bf16", [0, 0], precision="bf16"
    )
    result = report(runs)
    assert [g.label for g in result.groups] == ["fp32 (3 seeds)", "bf16 (2 seeds)"]
    assert [len(g.runs) for g in result.groups] == [3, 2]


def test_seed_noise_gives_the_pooled_standard_error(tmp_path):
    d = 0.02  # per-seed offsets -d, 0, d: the sample variance of each side is d**2
    se = d * math.sqrt(1 / 3 + 1 / 3)
    ref = _seed_set(tmp_path, "fp32", [-d, 0, d])
    worse = _seed_set(tmp_path, "bf16", [-d, 0, d], shift=5 * se, precision="bf16")
    (verdict,) = report(ref + worse).verdicts
    assert verdict.noise == "seeds"
    assert math.isclose(verdict.sigma, se, rel_tol=1e-9)
    assert math.isclose(verdict.z, 5.0, rel_tol=1e-6)
    assert verdict.outcome == "worse" and verdict.verdict.startswith("worse by 0.0816")
    assert verdict.verdict.endswith("5.0 sigma)")


def test_a_difference_between_2_and_3_sigma_asks_for_more_seeds(tmp_path):
    d = 0.02
    se = d * math.sqrt(2 / 3)
    ref = _seed_set(tmp_path, "fp32", [-d, 0, d])
    other = _seed_set(tmp_path, "bf16", [-d, 0, d], shift=2.5 * se, precision="bf16")
    (verdict,) = report(ref + other).verdicts
    # 3 seeds per side at z = 2.5: 3 * (3 / 2.5)**2 = 4.32 -> 5 seeds put it at 3 sigma
    assert verdict.outcome == "inconclusive" and verdict.seeds_needed == 5
    assert verdict.verdict == "inconclusive: run 5 seeds"


def test_same_distribution_is_within_noise(tmp_path):
    ref = _seed_set(tmp_path, "fp32", [0.01, -0.02, 0.0], noise=0.05)
    same = _seed_set(tmp_path, "bf16", [0.0, 0.015, -0.01], precision="bf16", noise=0.05)
    (verdict,) = report(ref + same).verdicts
    assert verdict.outcome == "within" and verdict.verdict == "within noise"
    assert abs(verdict.z) <= 2


def test_curve_noise_of_single_runs_matches_white_noise(tmp_path):
    """One run per side: sigma comes from the curve. For white noise of std s over 400 rows,
    the final loss is a mean over the last 40 rows: sigma of the difference is
    s * sqrt(2 / 40)."""
    noise = 0.05
    a = write_run(tmp_path / "a", noisy_curve(1, steps=400, noise=noise))
    b = write_run(tmp_path / "b", noisy_curve(2, steps=400, noise=noise), precision="bf16")
    (verdict,) = report([a, b]).verdicts
    expected = noise * math.sqrt(2 / 40)
    assert verdict.noise == "curve"
    assert 0.7 * expected < verdict.sigma < 1.3 * expected
    assert verdict.outcome == "within"
    far = write_run(
        tmp_path / "c", noisy_curve(3, steps=400, noise=noise, shift=0.2), precision="bf16"
    )
    (worse,) = report([a, far]).verdicts
    assert worse.outcome == "worse" and worse.z > 10


def test_too_few_shared_rows_is_inconclusive(tmp_path):
    a = write_run(tmp_path / "a", noisy_curve(1, steps=12))
    b = write_run(tmp_path / "b", noisy_curve(2, steps=12, shift=1.0), precision="bf16")
    (verdict,) = report([a, b]).verdicts
    assert verdict.verdict == "inconclusive: run 3 seeds"


def test_the_numbers_cover_only_the_steps_every_run_logged(tmp_path):
    long = noisy_curve(1, steps=300)
    a = write_run(tmp_path / "a", long)
    b = write_run(tmp_path / "b", long[:200], precision="bf16")  # stopped early
    (verdict,) = report([a, b]).verdicts
    assert verdict.steps == (1, 200)
    assert math.isclose(verdict.final, verdict.final_ref)  # the same curve up to step 200
    assert math.isclose(verdict.mean_ref, float(np.mean(long[:200])))
