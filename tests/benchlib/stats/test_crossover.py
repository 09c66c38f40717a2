from __future__ import annotations

import math

import pytest

from benchlib.stats.crossover import find_crossover, interpolate_crossing
from benchlib.stats.intervals import ratio_curve
from benchlib.stats.types import Curve, LevelRatio, LevelSample, Ratio, RatioCurve


def _curve(*levels):
    """levels: (C, point) or (C, point, low, high)."""
    out = []
    for level in levels:
        c, point, *bounds = level
        if bounds:
            out.append(LevelRatio(c, Ratio(point, bounds[0], bounds[1], "repeats-log-t", 0.95)))
        else:
            out.append(LevelRatio(c, Ratio(point, None, None, "none", 0.95)))
    return RatioCurve("A", "B", tuple(out))


def test_crossing_is_interpolated_linearly_on_log_scales():
    # log r goes from ln 1.1 to -ln 1.1 between C=1 and C=4: halfway in log C, i.e. C=2.
    assert interpolate_crossing(1, 1.1, 4, 1 / 1.1) == pytest.approx(2.0)
    # r = 1.2 at C=1, 0.8 at C=4: t = ln1.2 / (ln1.2 - ln0.8) = 0.18232 / 0.40547 = 0.44966,
    # C = 4 ** 0.44966 = 1.8652.
    assert interpolate_crossing(1, 1.2, 4, 0.8) == pytest.approx(1.8652, abs=1e-4)


def test_crossing_does_not_depend_on_which_side_is_the_reference():
    forward = find_crossover(_curve((1, 1.2), (4, 0.8)))
    backward = find_crossover(_curve((1, 1 / 1.2), (4, 1 / 0.8)))
    assert forward.last is not None
    assert backward.last is not None
    assert forward.last.concurrency == pytest.approx(backward.last.concurrency)
    assert (forward.last.direction, backward.last.direction) == ("falls-behind", "pulls-ahead")


@pytest.mark.parametrize(
    ("points", "phrase"),
    [
        ((1.1, 1.3, 1.02), "B is ahead of A at every tested level (C=1..4)"),
        ((0.9, 0.7, 0.99), "B is behind A at every tested level (C=1..4)"),
        ((1.0, 1.0, 1.0), "level at every tested level"),
    ],
)
def test_no_crossover_gives_none_with_the_reason(points, phrase):
    result = find_crossover(_curve(*zip((1, 2, 4), points, strict=True)))
    assert result.crossings == ()
    assert result.last is None
    assert phrase in (result.reason or "")


def test_several_crossings_are_all_reported_and_the_last_is_where_the_sign_settles():
    down = 1 / 1.1  # symmetric on the log scale, so each crossing is the geometric midpoint
    result = find_crossover(_curve((1, 1.1), (2, down), (4, 1.1), (8, down), (16, 0.8)))
    assert [x.direction for x in result.crossings] == [
        "falls-behind",
        "pulls-ahead",
        "falls-behind",
    ]
    assert [x.concurrency for x in result.crossings] == pytest.approx(
        [math.sqrt(2), math.sqrt(8), math.sqrt(32)]
    )
    assert result.last is result.crossings[-1]
    assert (result.last.lower_level, result.last.upper_level) == (4, 8)


def test_a_tie_at_a_level_between_opposite_sides_is_a_crossing_at_that_level():
    result = find_crossover(_curve((1, 1.1), (2, 1.0), (4, 0.9)))
    assert len(result.crossings) == 1
    assert result.crossings[0].concurrency == 2.0
    assert (result.crossings[0].lower_level, result.crossings[0].upper_level) == (1, 4)
    # Touching 1 without changing side is not a crossing.
    assert find_crossover(_curve((1, 1.1), (2, 1.0), (4, 1.2))).crossings == ()


def test_crossing_interval_comes_from_where_the_band_edges_cross_one():
    result = find_crossover(_curve((1, 1.2, 1.1, 1.3), (2, 0.99, 0.9, 1.1), (4, 0.8, 0.75, 0.85)))
    assert result.inconclusive_levels == (2,)
    last = result.last
    assert last is not None
    assert last.has_interval
    # Lower edge: ln 1.1 at C=1 to ln 0.9 at C=2 -> 2 ** (ln1.1 / (ln1.1 - ln0.9)) = 1.3899.
    assert last.low == pytest.approx(1.3899, abs=1e-4)
    # Upper edge: ln 1.1 at C=2 to ln 0.85 at C=4 -> 2 * 2 ** (ln1.1 / (ln1.1 - ln0.85)) = 2.5841.
    assert last.high == pytest.approx(2.5841, abs=1e-4)
    assert last.low is not None
    assert last.high is not None
    assert last.low < last.concurrency < last.high
    assert last.conclusive  # + at C=1, - at C=4


def test_a_band_that_contains_one_at_the_first_level_leaves_the_lower_bound_open():
    result = find_crossover(_curve((1, 1.05, 0.95, 1.15), (2, 0.8, 0.7, 0.9)))
    assert result.last is not None
    assert result.last.low is None
    assert result.last.high is not None
    assert not result.last.conclusive  # nothing before it excludes 1


def test_a_blip_inside_the_noise_makes_inconclusive_crossings():
    result = find_crossover(
        _curve(
            (1, 1.2, 1.1, 1.3),
            (2, 0.98, 0.9, 1.06),
            (4, 1.02, 0.95, 1.1),
            (8, 0.8, 0.75, 0.85),
        )
    )
    assert len(result.crossings) == 3
    assert [x.conclusive for x in result.crossings] == [True, False, True]
    assert result.inconclusive_levels == (2, 4)


def test_points_without_intervals_give_crossings_without_intervals():
    result = find_crossover(_curve((1, 1.2), (4, 0.8)))
    assert result.last is not None
    assert not result.last.has_interval
    assert (result.last.low, result.last.high) == (None, None)


def _repeat_curve(name, means, spread):
    return Curve(
        name,
        [
            LevelSample.from_repeats(c, [m * (1 - spread), m, m * (1 + spread)])
            for c, m in means.items()
        ],
    )


def test_noisy_repeats_keep_the_crossing_but_widen_it_until_it_is_inconclusive():
    a = {1: 100.0, 2: 180.0, 5: 400.0, 10: 600.0}
    b = {1: 110.0, 2: 170.0, 5: 300.0, 10: 420.0}
    quiet = find_crossover(ratio_curve(_repeat_curve("a", a, 0.01), _repeat_curve("b", b, 0.01)))
    noisy = find_crossover(ratio_curve(_repeat_curve("a", a, 0.15), _repeat_curve("b", b, 0.15)))
    assert quiet.last is not None
    assert noisy.last is not None
    assert noisy.last.concurrency == pytest.approx(quiet.last.concurrency)
    assert quiet.last.conclusive
    assert quiet.inconclusive_levels == ()
    assert not noisy.last.conclusive
    assert 1 in noisy.inconclusive_levels
    assert 2 in noisy.inconclusive_levels
    assert quiet.last.low is not None
    assert quiet.last.high is not None
    assert noisy.last.low is None or noisy.last.low < quiet.last.low
    assert noisy.last.high is None or noisy.last.high > quiet.last.high


def test_fewer_than_two_levels_has_no_crossover():
    result = find_crossover(_curve((1, 1.2)))
    assert result.last is None
    assert "fewer than 2" in (result.reason or "")
