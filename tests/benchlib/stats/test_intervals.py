from __future__ import annotations

import random
import statistics

import pytest

from benchlib.stats.intervals import level_ratio, ratio_curve, ratio_from_repeats
from benchlib.stats.types import Curve, LevelSample
from tests.benchlib.stats.synthetic import bounds, closed_loop_requests


def _repeats(rng, mean, sd, n):
    return [rng.gauss(mean, sd) for _ in range(n)]


def test_repeat_interval_covers_the_true_ratio_at_about_the_nominal_rate():
    rng = random.Random(7)
    true_ratio = 90.0 / 100.0
    trials, covered = 600, 0
    for _ in range(trials):
        r = ratio_from_repeats(_repeats(rng, 100, 5, 3), _repeats(rng, 90, 5, 3))
        assert r.low is not None
        assert r.high is not None
        covered += r.low <= true_ratio <= r.high
    assert 0.91 <= covered / trials <= 0.99


def test_repeat_interval_narrows_with_more_repeats():
    rng = random.Random(3)

    def mean_width(n):
        widths = []
        for _ in range(200):
            r = ratio_from_repeats(_repeats(rng, 100, 5, n), _repeats(rng, 90, 5, n))
            assert r.low is not None
            assert r.high is not None
            widths.append(r.high - r.low)
        return statistics.fmean(widths)

    w2, w5, w20 = mean_width(2), mean_width(5), mean_width(20)
    assert w2 > w5 > w20


def test_repeat_interval_is_reciprocal_when_the_sides_swap():
    a, b = [100.0, 104.0, 97.0], [88.0, 91.0, 93.0]
    ab, ba = ratio_from_repeats(a, b), ratio_from_repeats(b, a)
    (ab_low, ab_high), (ba_low, ba_high) = bounds(ab), bounds(ba)
    assert ba.point == pytest.approx(1 / ab.point)
    assert ba_low == pytest.approx(1 / ab_high)
    assert ba_high == pytest.approx(1 / ab_low)


def test_identical_repeats_give_ratio_one_with_an_interval_containing_one():
    values = [100.0, 103.0, 98.0]
    r = ratio_from_repeats(values, values)
    low, high = bounds(r)
    assert r.point == pytest.approx(1.0)
    assert low < 1.0 < high
    assert r.inconclusive
    assert r.method == "repeats-log-t"


def test_repeats_without_spread_give_a_zero_width_interval():
    r = ratio_from_repeats([100.0, 100.0], [50.0, 50.0])
    assert (r.low, r.point, r.high) == (0.5, 0.5, 0.5)


def test_repeats_need_two_per_side():
    with pytest.raises(ValueError, match="at least 2"):
        ratio_from_repeats([100.0], [90.0, 91.0])


def test_level_ratio_prefers_repeats_then_requests_then_no_interval():
    reqs = closed_loop_requests(concurrency=2, per_slot=5, tok_per_s=50, seed=1)
    with_repeats = LevelSample(2, 100.0, repeats=[99.0, 101.0], requests=reqs)
    with_one_repeat = LevelSample(2, 100.0, repeats=[99.0], requests=reqs)
    bare = LevelSample(2, 100.0)
    assert level_ratio(with_repeats, with_repeats).method == "repeats-log-t"
    assert level_ratio(with_one_repeat, with_repeats).method == "batch-means-log-t"
    # Too few requests for three time blocks: no interval, and the reason.
    few = LevelSample.from_requests(2, reqs[:2])
    refused = level_ratio(few, few)
    assert refused.method == "none" and "too few" in refused.refused
    r = level_ratio(bare, LevelSample(2, 80.0))
    assert (r.method, r.point, r.low, r.high) == ("none", 0.8, None, None)
    assert r.sign == 0  # a point without an interval has no sign
    assert not r.inconclusive


def test_ratio_curve_matches_levels_by_concurrency_and_lists_the_rest():
    a = Curve.from_values("a", {1: 10.0, 2: 20.0, 4: 40.0})
    b = Curve.from_values("b", {2: 10.0, 4: 80.0, 8: 90.0})
    curve = ratio_curve(a, b)
    assert curve.concurrencies == (2, 4)
    assert [lvl.ratio.point for lvl in curve.levels] == [0.5, 2.0]
    assert curve.unmatched == (1, 8)


def test_curve_rejects_duplicate_levels_and_sorts_the_rest():
    with pytest.raises(ValueError, match="duplicate"):
        Curve("a", [LevelSample(2, 1.0), LevelSample(2, 2.0)])
    assert Curve("a", [LevelSample(4, 1.0), LevelSample(1, 2.0)]).concurrencies == (1, 4)


def test_the_point_is_always_the_ratio_of_the_level_figures_and_the_interval_contains_it():
    reqs_a = closed_loop_requests(concurrency=2, per_slot=20, tok_per_s=50, seed=1)
    reqs_b = closed_loop_requests(concurrency=2, per_slot=20, tok_per_s=60, seed=2)
    a = LevelSample.from_requests(2, reqs_a)
    b = LevelSample.from_requests(2, reqs_b)
    r = level_ratio(a, b)
    assert r.method == "batch-means-log-t" and not r.refused
    assert r.point == b.value / a.value
    low, high = bounds(r)
    assert low <= r.point <= high


def test_a_bootstrap_over_requests_that_are_not_the_rows_is_refused():
    """The reported case: B's requests came from another level (C=100 labelled C=1), so the
    bootstrap said 3.7x while the row's figures said 1.05x."""
    a_reqs = closed_loop_requests(concurrency=1, per_slot=30, tok_per_s=90, seed=1)
    b_reqs = closed_loop_requests(concurrency=1, per_slot=30, tok_per_s=340, seed=2)
    a = LevelSample.from_requests(1, a_reqs)
    b = LevelSample(1, a.value * 1.053, requests=b_reqs)  # the row shows B at 1.053 x A
    r = level_ratio(a, b)
    assert r.point == pytest.approx(1.053)
    assert (r.low, r.high, r.method) == (None, None, "none")
    assert "not the data the figures were computed from" in r.refused


def test_repeats_whose_interval_excludes_the_point_are_refused():
    # A value that is not the mean of its repeats: the log-t interval sits around 1.0, the
    # row's figures say 2.0.
    a = LevelSample(4, 50.0, repeats=[100.0, 101.0, 99.0])
    b = LevelSample(4, 100.0, repeats=[100.0, 100.5, 99.5])
    r = level_ratio(a, b)
    assert r.point == 2.0
    assert not r.has_interval and r.refused
