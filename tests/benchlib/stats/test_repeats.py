from __future__ import annotations

import math
import random

import pytest

from benchlib.stats.decision import Arm
from benchlib.stats.decision_rule import decide_curves
from benchlib.stats.intervals import ratio_curve, ratio_from_repeats
from benchlib.stats.repeats import (
    PooledVariance,
    level_log_variance,
    pooled_log_variance,
    ratio_from_pooled_repeats,
)
from benchlib.stats.types import Curve, LevelSample

LEVELS = (1, 2, 4, 8)
ARMS = (Arm("A", "A"), Arm("B", "B"))


def _experiment(
    rng: random.Random, *, shift: float, run_sd: float, repeats: int = 2
) -> tuple[Curve, Curve]:
    """Both arms over LEVELS, each run's figure log-normal around its level's true value:
    every run a fresh draw of the run-to-run noise (a fresh server start)."""
    curves = []
    for factor in (1.0, shift):
        levels = [
            LevelSample.from_repeats(
                c,
                [100.0 * c * factor * math.exp(rng.gauss(0.0, run_sd)) for _ in range(repeats)],
            )
            for c in LEVELS
        ]
        curves.append(Curve("A" if factor == 1.0 else "B", levels))
    return curves[0], curves[1]


def _statuses(experiments: int, *, shift: float, run_sd: float, seed: int) -> list[str]:
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(experiments):
        a, b = _experiment(rng, shift=shift, run_sd=run_sd)
        out.extend(level.status for level in decide_curves(a, b, arms=ARMS).levels)
    return out


def test_pooled_variance_is_the_residual_of_each_arm_and_level_mean_on_the_log_scale() -> None:
    levels = {1: ([100.0, 110.0], [90.0, 99.0]), 2: ([200.0, 200.0, 200.0], [50.0, 55.0])}
    pooled = pooled_log_variance(levels)
    assert pooled is not None
    step = math.log(1.1) ** 2 / 2  # each pair that differs by 10% adds this
    assert pooled.df == 1 + 1 + 2 + 1
    assert pooled.variance == pytest.approx(3 * step / 5)
    assert pooled_log_variance({1: levels[1]}) is None  # one level: nothing to pool


def test_a_synthetic_aa_with_run_level_noise_concludes_at_most_at_the_nominal_rate() -> None:
    # 250 experiments x 4 levels of identical arms, 2 repeats each, 2% run-to-run noise.
    statuses = _statuses(250, shift=1.0, run_sd=0.02, seed=11)
    flagged = sum(s in ("ahead", "behind") for s in statuses) / len(statuses)
    assert flagged <= 0.05


def test_a_five_percent_shift_is_found_ahead_with_the_pooled_variance() -> None:
    # 1% run-to-run noise (a quiet machine): the per-level Welch interval, one degree of
    # freedom per arm, finds the shift at few levels; the pooled one at nearly all.
    statuses = _statuses(100, shift=1.05, run_sd=0.01, seed=5)
    assert sum(s == "ahead" for s in statuses) / len(statuses) >= 0.9
    rng = random.Random(5)
    welch_ahead = 0
    for _ in range(100):
        a, b = _experiment(rng, shift=1.05, run_sd=0.01)
        for la, lb in zip(a.levels, b.levels, strict=True):
            r = ratio_from_repeats(la.repeats, lb.repeats)
            welch_ahead += r.low is not None and r.low > 1.0
    assert welch_ahead / 400 < 0.8


def test_a_level_noisier_than_the_rest_does_not_borrow_their_calm() -> None:
    calm = ([100.0, 100.5], [100.2, 100.4])
    noisy = ([100.0, 120.0], [104.0, 125.0])
    pooled = pooled_log_variance({1: calm, 2: calm, 4: calm, 8: noisy})
    assert pooled is not None
    r = ratio_from_pooled_repeats(*noisy, pooled, confidence=0.95)
    assert r.low is not None and r.high is not None
    own = level_log_variance(*noisy)
    assert own.variance > pooled.variance
    # The level's own variance on the pooled degrees of freedom.
    alone = ratio_from_pooled_repeats(*noisy, PooledVariance(0.0, pooled.df), confidence=0.95)
    assert (r.low, r.high) == (alone.low, alone.high)
    assert r.low < 1.0 < r.high


def test_the_curve_interval_pools_over_levels_and_one_level_keeps_its_own_welch() -> None:
    rng = random.Random(2)
    a, b = _experiment(rng, shift=1.0, run_sd=0.02)
    assert {lv.ratio.method for lv in ratio_curve(a, b).levels} == {"repeats-pooled-log-t"}
    one_a, one_b = Curve("A", a.levels[:1]), Curve("B", b.levels[:1])
    assert ratio_curve(one_a, one_b).levels[0].ratio.method == "repeats-log-t"
    for level in ratio_curve(a, b).levels:
        assert level.ratio.low is not None and level.ratio.high is not None
        assert level.ratio.low <= level.ratio.point <= level.ratio.high
