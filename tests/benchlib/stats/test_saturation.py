from __future__ import annotations

import pytest

from benchlib.stats.saturation import despike, find_saturation, gain_per_doubling
from benchlib.stats.types import Curve, LevelSample

CS = (1, 2, 5, 10, 30, 70, 100, 250)


def _curve(values, name="p"):
    return Curve.from_values(name, dict(zip(CS[: len(values)], values, strict=True)))


def test_a_plateau_saturates_at_the_first_level_within_tolerance_of_the_peak():
    s = find_saturation(_curve([92.6, 176, 380, 540, 690, 750, 765, 773]))
    assert s.saturated
    assert s.concurrency == 70  # 750 >= 0.95 * 773 = 734.4; 690 is not
    assert s.throughput == 773
    assert "from C=70" in s.reason


def test_the_tolerance_is_a_parameter():
    s = find_saturation(_curve([92.6, 176, 380, 540, 690, 750, 765, 773]), tolerance=0.15)
    assert s.concurrency == 30


def test_a_still_rising_curve_is_not_saturated_within_the_tested_range():
    s = find_saturation(_curve([50, 100, 240, 470, 1300, 2800, 3900, 9000]))
    assert not s.saturated
    assert s.concurrency is None
    assert s.reason.startswith("not saturated within the tested range")


def test_a_curve_still_gaining_fast_at_the_last_step_is_not_saturated():
    # 960 is within 5% of 1000, but the last step still gains ~6% per doubling.
    s = find_saturation(Curve.from_values("p", {1: 100, 10: 700, 100: 960, 200: 1020}))
    assert not s.saturated
    assert "per doubling" in s.reason


def test_a_decreasing_tail_keeps_the_saturation_point():
    s = find_saturation(_curve([92.6, 176, 380, 540, 690, 750, 720, 610]))
    assert s.saturated
    assert s.concurrency == 70
    assert s.peak_concurrency == 70


def test_a_single_noisy_spike_does_not_move_the_saturation_point():
    clean = find_saturation(_curve([77.5, 125.1, 183.2, 240, 299.5, 337.7, 340, 354]))
    spiky = find_saturation(_curve([77.5, 125.1, 183.2, 240, 299.5, 337.7, 420, 354]))
    assert clean.concurrency == spiky.concurrency == 70
    assert spiky.throughput == pytest.approx(354)


def test_repeats_are_averaged():
    curve = Curve(
        "p",
        [
            LevelSample.from_repeats(1, [90, 110]),
            LevelSample.from_repeats(10, [480, 520]),
            LevelSample.from_repeats(100, [490, 530]),
        ],
    )
    s = find_saturation(curve)
    assert s.saturated
    assert s.concurrency == 10
    assert s.throughput == pytest.approx(510)


def test_one_level_cannot_be_called_saturated():
    s = find_saturation(_curve([100]))
    assert not s.saturated
    assert s.reason == "only one level tested"


def test_despike_replaces_only_outliers_and_gain_is_per_doubling():
    assert despike([1.0, 9.0, 2.0, 3.0], 0.05) == [1.0, 2.0, 3.0, 3.0]
    assert despike([100.0, 104.0, 101.0], 0.05) == [100.0, 104.0, 101.0]
    assert gain_per_doubling(10, 100, 40, 121) == pytest.approx(0.1)
