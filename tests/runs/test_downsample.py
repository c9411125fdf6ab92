"""Min/max envelopes: bounded size, bucket means exact, no spike dropped."""

from __future__ import annotations

import numpy as np

from ampkit.runs.downsample import envelope


def test_a_single_spike_in_100k_steps_is_kept_at_full_height():
    steps = np.arange(1, 100_001)
    values = np.full(100_000, 2.0)
    values[54_320] = 1e4
    env = envelope(steps, values, points=1000)
    assert env.downsampled and len(env.x) == 1000
    assert env.high.max() == 1e4 and env.low.min() == 2.0
    bucket = int(np.argmax(env.high))
    assert env.x[bucket] <= 54_321 < env.x[bucket + 1]


def test_bucket_means_are_the_means_of_consecutive_steps():
    rng = np.random.default_rng(0)
    values = rng.normal(size=10_000)
    env = envelope(np.arange(10_000), values, points=100)
    np.testing.assert_allclose(env.mean, values.reshape(100, 100).mean(axis=1))
    np.testing.assert_array_equal(env.low, values.reshape(100, 100).min(axis=1))
    np.testing.assert_array_equal(env.x, np.arange(0, 10_000, 100))


def test_non_finite_values_are_listed_not_averaged():
    values = np.ones(5000)
    values[[10, 4000]] = [np.inf, np.nan]
    env = envelope(np.arange(5000), values, points=50)
    np.testing.assert_array_equal(env.nonfinite, [10, 4000])
    assert np.all(env.mean == 1.0) and np.all(env.high == 1.0)


def test_a_short_series_is_drawn_as_it_is():
    env = envelope([1, 2, 3], [3.0, float("nan"), 1.0], points=10)
    assert not env.downsampled
    np.testing.assert_array_equal(env.x, [1, 2, 3])
    np.testing.assert_array_equal(env.nonfinite, [2])
