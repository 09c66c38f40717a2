"""Where a schedule switches, from the running batch sizes each level's server reported.

Seeded readings stand for the running-requests gauge at about one reading a second: C=1 runs
batch 1 throughout; a closed loop at C=2 drops to batch 1 between one request's end and the
next admission; C=4 dips to 2-3 when requests of equal length end on the same step.
"""

from __future__ import annotations

import random

from benchlib.stats.batch_thresholds import level_batches, plan_batches
from benchlib.stats.decision import Arm
from benchlib.stats.decision_matrix import MatrixVariant, decide_matrix
from benchlib.stats.schedule import Variant, derive_schedule
from benchlib.stats.types import Curve, LevelSample


def readings(seed: int, shares: dict[int, float], n: int = 60) -> dict[int, int]:
    """``n`` gauge readings drawn with the given share per batch size."""
    rng = random.Random(seed)
    sizes, weights = zip(*shares.items(), strict=True)
    counts: dict[int, int] = {}
    for b in rng.choices(sizes, weights, k=n):
        counts[b] = counts.get(b, 0) + 1
    return counts


# C=2 dips to batch 1 about a fifth of the time; C=4 to 2-3 now and then; at C=16 the drain
# at the window's edge is read once (under the share a batch size needs to count).
OBSERVED = {
    1: readings(1, {1: 1.0}),
    2: readings(2, {1: 0.2, 2: 0.8}),
    4: readings(4, {3: 0.15, 4: 0.85}),
    16: {**readings(16, {14: 0.1, 15: 0.2, 16: 0.7}), 2: 1},
}


def test_a_level_range_leaves_out_batch_sizes_read_too_rarely_and_idle_readings() -> None:
    batches = level_batches(16, {**OBSERVED[16], 0: 5})
    assert (batches.low, batches.high) == (14, 16)
    assert batches.readings == 61  # the idle readings are not batches
    assert level_batches(8, None).low == level_batches(8, {}).high == 8


def test_without_readings_the_switch_is_on_concurrency() -> None:
    plan = plan_batches([1, 2, 4, 16], {1: [1], 2: [0, 1], 4: [0], 16: [0]})
    assert not plan.observed
    assert plan.choices == {1: 1, 2: 0, 4: 0, 16: 0}
    assert [s.at for s in plan.switches] == [2]


def test_a_level_that_runs_the_batch_sizes_of_a_drafting_level_holds_its_variant() -> None:
    # C=2 runs batch 1 as C=1 does, and K=1 is not behind there: K=1 through batch 2, so no
    # switch falls inside C=2's range; off from 3, below every batch C=4 runs.
    plan = plan_batches([1, 2, 4, 16], {1: [1], 2: [0, 1], 4: [0], 16: [0]}, OBSERVED)
    assert plan.choices == {1: 1, 2: 1, 4: 0, 16: 0}
    assert plan.held == {2: (1,)}
    assert [(s.at, s.straddling) for s in plan.switches] == [(3, ())]


def test_batch_sizes_no_level_ran_go_to_the_simpler_variant() -> None:
    # Batch 3 was run by no level: off keeps it whichever side off is on.
    plan = plan_batches([1, 2, 4], {1: [1], 2: [1], 4: [0]}, {**OBSERVED, 4: {4: 50}})
    assert [s.at for s in plan.switches] == [3]
    plan = plan_batches([2, 8], {2: [0], 8: [1]}, {2: {1: 10, 2: 40}, 8: {7: 10, 8: 40}})
    assert [s.at for s in plan.switches] == [7]


def test_overlapping_ranges_that_cannot_share_a_variant_are_named() -> None:
    # Off is ahead of K=1 at C=2 here: C=1 needs K=1 at batch 1, C=2 runs batch 1 a fifth of
    # its time. The switch goes where fewer readings fall on the wrong side (C=2's batch 1),
    # and C=2 is named as running a mix.
    plan = plan_batches([1, 2, 4], {1: [1], 2: [0], 4: [0]}, OBSERVED)
    assert plan.choices == {1: 1, 2: 0, 4: 0}
    assert [(s.at, s.straddling) for s in plan.switches] == [(2, (2,))]


def test_a_dip_into_a_range_run_more_by_the_lower_level_leaves_the_upper_straddling() -> None:
    # C=4 runs batch 2 for about 30% of its readings, C=2 for about 80%: batch 2 stays with
    # K=1 (held from C=1) and C=4 is named as running a mix.
    observed = {**OBSERVED, 4: readings(4, {2: 0.3, 3: 0.2, 4: 0.5})}
    plan = plan_batches([1, 2, 4], {1: [1], 2: [0, 1], 4: [0]}, observed)
    assert [(s.at, s.straddling) for s in plan.switches] == [(3, (4,))]


def _variant(name: str, k: int, values: dict[int, float]) -> MatrixVariant:
    levels = [LevelSample.from_repeats(c, [v * 0.998, v, v * 1.002]) for c, v in values.items()]
    return MatrixVariant(Arm(name, name, speculative=k > 0), Curve(name, levels), k)


# The shape of the simulated EAGLE-3 matrix: K=1 ahead at C=1, K=1 and off within 0.5% at C=2
# (no interval separates them), off ahead from C=4, K=3 behind from C=2.
MATRIX = [
    _variant("off", 0, {1: 91.0, 2: 158.8, 4: 270.0, 16: 520.0}),
    _variant("K=1", 1, {1: 101.8, 2: 158.5, 4: 246.0, 16: 396.0}),
    _variant("K=3", 3, {1: 84.6, 2: 132.0, 4: 189.0, 16: 277.0}),
]


def test_the_schedule_and_the_matrix_decision_switch_where_the_batch_sizes_say() -> None:
    variants = [Variant(v.curve, v.draft_length) for v in MATRIX]
    on_c = derive_schedule(variants, margin=0.02)
    assert [(s.start, s.end, s.draft_length) for s in on_c.steps()] == [(1, 1, 1), (2, None, 0)]
    schedule = derive_schedule(variants, margin=0.02, observed=OBSERVED)
    assert [(s.start, s.end, s.draft_length) for s in schedule.steps()] == [
        (1, 2, 1),
        (3, None, 0),
    ]
    assert "ran batch sizes 1-2 here, overlapping C=1" in schedule.choices[1].reason
    d = decide_matrix(MATRIX, observed=OBSERVED)
    assert d.steps == schedule.steps()
    assert d.recommendation.startswith("Schedule: C=1-2 K=1; C=3 and above off")
    assert d.thresholds.startswith(
        "Switches placed on the running batch sizes the server reported at each level"
    )
    assert "C=1: 1; C=2: 1-2; C=4: 3-4; C=16: 14-16" in d.thresholds
    assert d.thresholds in d.statements()
    band = next(b for b in d.bands if 2 in b.levels)
    assert (band.start, band.end, band.draft_length) == (1, 2, 1)
    assert "C=2 runs batch sizes 1-2, overlapping C=1" in band.sentence


def test_without_a_margin_a_variant_below_by_the_points_is_not_held() -> None:
    # At margin 0, K=1's 158.5 at C=2 is below off's 158.8: C=2 keeps off, the switch goes
    # where fewer of the two levels' readings fall on the wrong side, and C=2 is named.
    variants = [Variant(v.curve, v.draft_length) for v in MATRIX]
    schedule = derive_schedule(variants, margin=0.0, observed=OBSERVED)
    assert [(s.start, s.end, s.draft_length) for s in schedule.steps()] == [(1, 1, 1), (2, None, 0)]
    d = decide_matrix(MATRIX, margin=0.0, observed=OBSERVED)
    assert d.steps == schedule.steps()
    assert "C=2 runs batch sizes 1-2 across the switch at 2" in d.thresholds
    # C=2's turnarounds (batch 1) run K=1: the decision says so, and with no step figures
    # in this matrix it claims no amount.
    (cost,) = d.switch_costs
    assert (cost.concurrency, cost.batch, cost.cost) == (2, 1, None)
    assert cost.sentence.startswith("K=1 at batch 1 costs C=2 an amount not predicted (no step")
    assert d.statements()[-2:] == (cost.sentence, d.thresholds)


def test_an_unbeaten_variant_well_below_by_the_points_is_not_held() -> None:
    # At C=4 the repeats spread so widely that nothing is conclusive, but K=1's point is 9%
    # below off's: holding K=1 from C=1-2 through C=4 would run C=4 on it. The switch stays
    # between the ranges (C=4 dips to batch 2, which C=2 runs more): C=4 is named instead.
    # (A spread of 10%: the run-to-run variance is pooled over the matrix's levels, so a much
    # wider one would leave K=1's lead at C=1 inconclusive too.)
    wide = [
        MATRIX[0],
        MatrixVariant(
            MATRIX[1].arm,
            Curve(
                "K=1",
                [
                    *(lv for lv in MATRIX[1].curve.levels if lv.concurrency != 4),
                    LevelSample.from_repeats(4, [246.0 * 0.9, 246.0, 246.0 * 1.1]),
                ],
            ),
            1,
        ),
        MATRIX[2],
    ]
    observed = {**OBSERVED, 4: readings(4, {2: 0.2, 3: 0.2, 4: 0.6})}
    d = decide_matrix(wide, observed=observed)
    assert [(s.start, s.end, s.draft_length) for s in d.steps] == [(1, 2, 1), (3, None, 0)]
    assert "C=4 runs batch sizes 2-4 across the switch at 3" in d.thresholds


def test_the_matrix_decision_says_when_the_switches_are_on_concurrency() -> None:
    d = decide_matrix(MATRIX)
    assert d.thresholds.startswith("Switches placed on C: no running-batch readings")
    assert [(s.start, s.end, s.draft_length) for s in d.steps] == [(1, 1, 1), (2, None, 0)]
