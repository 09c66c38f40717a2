"""The break-even map: interpolation in acceptance, the contour and its band, placement decided
by the decision object, and, on the simulator's scheduler on a virtual clock (seeded), a map
that predicts two categories' measured B/A and their crossover levels."""

from __future__ import annotations

import pytest

from benchlib.simulator.profiles import get_profile
from benchlib.simulator.virtual import simulate_closed_loop
from benchlib.stats.breakeven import breakeven_map, check_prediction, map_from_stored, place
from benchlib.stats.decision import Arm, Decision, LevelEvidence
from benchlib.stats.decision_rule import decide, decide_curves
from benchlib.stats.types import Curve, LevelSample, Ratio

LEVELS = (1, 2, 4, 8, 16)
FORCED = (2.0, 2.5, 3.0, 3.5, 4.0)


def _ratio(point: float, half: float = 0.02) -> Ratio:
    return Ratio(point, point - half, point + half, "repeats-log-t", 0.95)


def _column(accept: float, points: dict[int, float]) -> tuple[float, Decision]:
    decision = decide(
        reference=Arm("off"),
        candidate=Arm(f"L={accept}", speculative=True),
        levels=[LevelEvidence(c, _ratio(p)) for c, p in points.items()],
    )
    return accept, decision


def test_prediction_interpolates_point_and_interval_linearly_and_never_extrapolates() -> None:
    bmap = breakeven_map([_column(2.0, {1: 0.8, 4: 0.6}), _column(3.0, {1: 1.2, 4: 0.9})])
    r = bmap.predict(2.25, 1)
    assert r is not None
    assert (r.point, r.low, r.high) == pytest.approx((0.9, 0.88, 0.92))
    assert bmap.predict(3.0, 4) == _ratio(0.9)
    assert bmap.predict(1.9, 1) is None and bmap.predict(3.1, 1) is None
    assert bmap.predict(2.5, 2) is None  # an untested level


def test_contour_is_where_the_point_and_each_bound_cross_one() -> None:
    bmap = breakeven_map([_column(2.0, {1: 0.8, 4: 0.6}), _column(3.0, {1: 1.2, 4: 0.9})])
    at1, at4 = bmap.contour()
    assert at1.at == pytest.approx(2.5)
    # The upper bound (point + 0.02) reaches 1 first, the lower bound last: the band.
    assert at1.low == pytest.approx(2.45) and at1.high == pytest.approx(2.55)
    assert (at4.at, at4.low, at4.high) == (None, None, None)  # behind at every acceptance
    columns = [_column(2.0, {1: 0.8, 4: 0.6}), _column(3.0, {1: 1.2, 4: 0.9})]
    stored = map_from_stored("off", [(a, d.to_dict()) for a, d in columns])
    assert stored.contour() == bmap.contour()
    assert [c.status for c in stored.cells] == [c.status for c in bmap.cells]


def test_a_placed_category_is_decided_on_the_carried_intervals() -> None:
    bmap = breakeven_map([_column(2.0, {1: 0.8, 4: 0.6}), _column(3.0, {1: 1.2, 4: 0.9})])
    (chat, code) = place(bmap, {"code": {1: 3.0, 4: 2.9}, "chat": {1: 1.5, 4: 2.0}})
    assert code.category == "code" and chat.category == "chat"
    assert code.decision.level(1).status == "ahead"  # type: ignore[union-attr]
    assert code.decision.level(4).status == "behind"  # type: ignore[union-attr]
    assert code.crossover_level == 4
    assert [(c.lower_level, c.upper_level) for c in code.decision.crossovers] == [(1, 4)]
    assert chat.off_map == (1,)  # 1.5 lies below the tested acceptances: no prediction there


def _curve(name: str, accept: float | None, seeds: tuple[int, int]) -> Curve:
    profile = get_profile("baseline") if accept is None else get_profile("eagle3")
    if accept is not None:
        profile = profile.replace(accept_length=accept)
    levels = []
    for c in LEVELS:
        runs = [
            simulate_closed_loop(
                profile, c, prompt_tokens=32, output_tokens=256, duration_s=120.0,
                warmup_s=5.0, seed=seed,
            ).output_tok_s
            for seed in seeds
        ]  # fmt: skip
        levels.append(LevelSample.from_repeats(c, runs))
    return Curve(name, levels, speculative=accept is not None)


def test_a_simulated_map_predicts_two_categories_measured_ratios_and_crossovers() -> None:
    """Seeded, on the simulator's own scheduler and virtual clock: five forced accept lengths
    x five levels, two repeats per arm; then two categories (accept length 2.7 and 3.6) each
    measured by its own A/B (other seeds). The prediction lies within the measured interval at
    >= 80% of levels and names each category's crossover level (the two differ)."""
    baseline = _curve("off", None, (1, 2))
    columns = [
        (a, decide_curves(baseline, _curve(f"L={a}", a, (10 + i, 20 + i))))
        for i, a in enumerate(FORCED)
    ]
    bmap = breakeven_map(columns)
    crossovers = {}
    for category, accept in (("chat", 2.7), ("code", 3.6)):
        (placed,) = place(bmap, {category: dict.fromkeys(LEVELS, accept)})
        measured = decide_curves(baseline, _curve(category, accept, (31, 32)))
        check = check_prediction(placed, measured)
        assert len(check.levels) == len(LEVELS)
        assert check.share_within >= 0.8, check
        assert check.crossover_found, check
        crossovers[category] = check.measured_crossover
    assert crossovers["chat"] < crossovers["code"]  # type: ignore[operator]
