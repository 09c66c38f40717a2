from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from benchlib.stats.schedule import Step, Variant, derive_schedule, inverse
from benchlib.stats.types import Curve, LevelSample, Ratio
from tests.benchlib.stats.synthetic import closed_loop_requests

TIGHT = (-0.004, 0.0, 0.004)  # relative spread of three repeats: +-0.4%
NOISY = (-0.3, 0.0, 0.3)  # +-30%


def _variant(
    name: str, k: int, means: Mapping[int, float], spread: tuple[float, ...] = TIGHT
) -> Variant:
    levels = [LevelSample.from_repeats(c, [m * (1 + d) for d in spread]) for c, m in means.items()]
    return Variant(Curve(name, levels, speculative=k > 0), k)


def test_without_a_conclusive_difference_the_simplest_variant_covers_every_load():
    off = _variant("off", 0, {1: 100, 4: 380, 16: 1400}, NOISY)
    k3 = _variant("k3", 3, {1: 104, 4: 370, 16: 1450}, NOISY)
    schedule = derive_schedule([off, k3])
    assert [(b.variant, b.start, b.end) for b in schedule.bands] == [("off", 1, None)]
    assert schedule.steps() == (Step(1, None, 0),)
    assert schedule.draft_length_at(1) == 0
    assert schedule.draft_length_at(10_000) == 0
    assert all("no variant is conclusively ahead of off" in c.reason for c in schedule.choices)


def test_single_figures_never_switch_however_far_apart_their_points():
    off = Variant(Curve.from_values("off", {1: 100, 8: 700}), 0)
    k3 = Variant(Curve.from_values("k3", {1: 150, 8: 400}, speculative=True), 3)
    schedule = derive_schedule([off, k3])
    assert [b.variant for b in schedule.bands] == ["off"]
    assert schedule.bands[0].gain_interval is None


def test_a_clean_crossover_drafts_up_to_the_last_winning_level_and_stops_above():
    off = _variant("off", 0, {1: 100, 2: 200, 4: 380, 8: 700, 16: 1300})
    k3 = _variant("k3", 3, {1: 105, 2: 210, 4: 340, 8: 500, 16: 700})
    schedule = derive_schedule([off, k3])
    assert [(b.variant, b.start, b.end, b.levels) for b in schedule.bands] == [
        ("k3", 1, 2, (1, 2)),
        ("off", 3, None, (4, 8, 16)),
    ]
    # The untested batch size 3 lies between a k3 level and an off level: the simpler (off).
    assert schedule.steps() == (Step(1, 2, 3), Step(3, None, 0))
    assert [schedule.draft_length_at(b) for b in (1, 2, 3, 500)] == [3, 3, 0, 0]
    spec = schedule.bands[0]
    assert spec.expected_gain == pytest.approx(1.05)
    interval = spec.gain_interval
    assert interval is not None
    assert 1.0 < interval[0] < 1.05 < interval[1]
    assert [g.versus for g in spec.over_reference] == ["off", "off"]
    plain = schedule.bands[1]
    # Off's gain over the runner-up (k3) at C=4, 8, 16: 380/340, 700/500, 1300/700.
    assert plain.expected_gain == pytest.approx((380 / 340 * 700 / 500 * 1300 / 700) ** (1 / 3))
    assert [g.ratio.point for g in plain.over_reference] == [1.0, 1.0, 1.0]
    assert "k3/off = 1.050x" in schedule.choices[0].reason


def test_noisy_repeats_keep_the_simpler_choice_where_tight_ones_switch():
    means_off = {1: 100, 2: 200, 4: 380, 8: 700}
    means_k3 = {1: 108, 2: 214, 4: 340, 8: 500}
    tight = derive_schedule([_variant("off", 0, means_off), _variant("k3", 3, means_k3)])
    noisy = derive_schedule(
        [_variant("off", 0, means_off, NOISY), _variant("k3", 3, means_k3, NOISY)]
    )
    assert tight.steps() == (Step(1, 2, 3), Step(3, None, 0))
    assert noisy.steps() == (Step(1, None, 0),)
    # The same points: only the evidence differs.
    assert [b.over_runner_up[0].ratio.point for b in noisy.bands] == pytest.approx([100 / 108])


def test_a_non_monotone_middle_band_gets_its_own_band_and_inconclusive_levels_keep_the_simpler():
    # C=1: k3 beats both. C=2: k1 and k3 both beat off, k3 vs k1 within noise -> k1 (simpler).
    # C=4: nothing conclusive -> off. C=8: k1 beats both (its own middle band).
    # C=16, 32: off beats both.
    off = _variant("off", 0, {1: 100, 2: 200, 4: 380, 8: 700, 16: 1300, 32: 2400})
    k1 = _variant("k1", 1, {1: 104, 2: 212, 4: 380, 8: 740, 16: 1200, 32: 2000})
    k3 = _variant("k3", 3, {1: 112, 2: 213, 4: 380, 8: 650, 16: 1000, 32: 1500})
    schedule = derive_schedule([off, k1, k3])
    assert [c.variant for c in schedule.choices] == ["k3", "k1", "off", "k1", "off", "off"]
    assert schedule.steps() == (
        Step(1, 1, 3),
        Step(2, 2, 1),
        Step(3, 7, 0),  # the gaps 3 and 5-7 go to off, the simpler neighbour
        Step(8, 8, 1),
        Step(9, None, 0),
    )
    middle = schedule.bands[3]
    assert (middle.variant, middle.levels) == ("k1", (8,))
    assert [g.versus for g in middle.over_runner_up] == ["off"]
    assert middle.expected_gain == pytest.approx(740 / 700)
    assert "k1/off" in schedule.choices[1].reason


def test_request_bootstraps_decide_where_there_are_no_repeats():
    def variant(name: str, k: int, rates: dict[int, float]) -> Variant:
        levels = [
            LevelSample.from_requests(
                c, closed_loop_requests(concurrency=c, per_slot=12, tok_per_s=r, seed=c + k)
            )
            for c, r in rates.items()
        ]
        return Variant(Curve(name, levels), k)

    off = variant("off", 0, {1: 90.0, 8: 80.0})
    k3 = variant("k3", 3, {1: 120.0, 8: 40.0})
    schedule = derive_schedule([off, k3])
    assert schedule.steps() == (Step(1, 1, 3), Step(2, None, 0))
    assert schedule.bands[0].over_runner_up[0].ratio.method == "batch-means-log-t"


def test_levels_not_tested_by_every_variant_are_left_out_and_named():
    off = _variant("off", 0, {1: 100, 2: 200, 4: 380})
    k3 = _variant("k3", 3, {1: 105, 4: 340, 8: 500})
    schedule = derive_schedule([off, k3])
    assert [c.concurrency for c in schedule.choices] == [1, 4]
    assert schedule.untested == (2, 8)
    with pytest.raises(ValueError, match="no concurrency level"):
        derive_schedule([_variant("a", 0, {1: 1.0}), _variant("b", 1, {2: 1.0})])
    with pytest.raises(ValueError, match="at least 2"):
        derive_schedule([off])
    with pytest.raises(ValueError, match="unique"):
        derive_schedule([off, off])


def test_inverse_swaps_and_inverts_the_bounds():
    ratio = inverse(Ratio(2.0, 1.6, 2.5, "repeats-log-t", 0.95))
    assert (ratio.point, ratio.low, ratio.high) == (0.5, 0.4, 0.625)
    assert inverse(Ratio(2.0, 0.0, 2.5, "bootstrap-requests", 0.95)).high == math.inf
