from __future__ import annotations

import pytest

from benchlib.stats.decision import Arm
from benchlib.stats.decision_matrix import MatrixVariant, decide_matrix
from benchlib.stats.schedule import Variant, derive_schedule
from benchlib.stats.types import Curve, LevelSample


def variant(name: str, k: int, values: dict[int, float], spread: float = 0.005) -> MatrixVariant:
    levels = [
        LevelSample.from_repeats(c, [v * (1 - spread), v, v * (1 + spread)])
        for c, v in values.items()
    ]
    return MatrixVariant(Arm(name, name, speculative=k > 0), Curve(name, levels), k)


def single(name: str, k: int, values: dict[int, float]) -> MatrixVariant:
    return MatrixVariant(Arm(name, name, speculative=k > 0), Curve.from_values(name, values), k)


def test_matrix_schedule_follows_the_statuses() -> None:
    d = decide_matrix(
        [
            variant("K=3", 3, {1: 150, 2: 110, 4: 99.8, 16: 60}),
            variant("off", 0, {1: 100, 2: 100, 4: 100, 16: 100}),
            variant("K=1", 1, {1: 130, 2: 120, 4: 100.5, 16: 80}),
        ],
        engine="vllm",
    )
    assert d.reference == "off"
    assert [(b.start, b.end, b.action, b.draft_length) for b in d.bands] == [
        (1, 1, "on", 3),
        (2, 2, "on", 1),
        (3, None, "off", 0),
    ]
    assert [(s.start, s.end, s.draft_length) for s in d.steps] == [
        (1, 1, 3),
        (2, 2, 1),
        (3, None, 0),
    ]
    assert d.recommendation == (
        "Schedule: C=1 K=3; C=2 K=1; C=3 and above off (margin ±2%, 95% confidence)."
    )
    assert [c.engine for c in d.configs] == ["vLLM"]
    assert d.configs[0].exact
    # The schedule is "on" at a level exactly where some variant's own decision is "ahead".
    for c in (1, 2, 4, 16):
        band = next(b for b in d.bands if c in b.levels)
        ahead = any(p.level(c).status == "ahead" for p in d.pairwise)  # type: ignore[union-attr]
        assert (band.action == "on") == ahead


def test_regression_schedule_and_verdict_agree_on_a_gain_inside_the_margin() -> None:
    # Once: the schedule said "serve without speculation" while the verdict said "disable
    # speculation above C=1 (draft-simple up to it)". A 1% gain is inside the margin: both off.
    d = decide_matrix(
        [
            variant("off", 0, {1: 100, 2: 100, 4: 100}, spread=0.001),
            variant("K=1", 1, {1: 101, 2: 99, 4: 98.5}, spread=0.001),
        ],
        engine="llamacpp",
    )
    verdict = d.pairwise[0]
    assert [lv.status for lv in verdict.levels] == ["equivalent", "equivalent", "equivalent"]
    assert verdict.recommendation.startswith("Recommendation: serve without speculation")
    assert d.recommendation.startswith("Schedule: serve without speculation")
    assert [b.action for b in d.bands] == ["off"]


def test_matrix_without_intervals_gives_no_recommendation() -> None:
    d = decide_matrix(
        [
            single("off", 0, {1: 100, 2: 100, 4: 100}),
            single("K=1", 1, {1: 100.5, 2: 99.7, 4: 99.7}),
        ]
    )
    assert [b.action for b in d.bands] == ["none"]
    assert d.recommendation.startswith("No recommendation yet")
    assert [(s.start, s.end, s.draft_length) for s in d.steps] == [(1, None, 0)]


def test_matrix_marks_levels_without_evidence_pending() -> None:
    d = decide_matrix(
        [
            variant("off", 0, {1: 100, 4: 100}),
            MatrixVariant(
                Arm("K=1", "K=1", speculative=True),
                Curve("K=1", [LevelSample.from_repeats(1, [129, 130, 131]), LevelSample(4, 101)]),
                1,
            ),
        ]
    )
    assert [(b.start, b.end, b.action) for b in d.bands] == [(1, 1, "on"), (2, None, "none")]
    assert "no recommendation yet at C=2 and above (off there until shown)" in d.recommendation


def test_matrix_needs_two_variants_and_a_common_level() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        decide_matrix([single("off", 0, {1: 1.0})])
    with pytest.raises(ValueError, match="no concurrency level"):
        decide_matrix([single("off", 0, {1: 1.0}), single("K=1", 1, {2: 1.0})])


@pytest.mark.parametrize("spread", [0.001, 0.005, 0.02])
def test_the_schedule_derived_with_the_margin_has_the_decisions_steps(spread: float) -> None:
    variants = [
        variant("off", 0, {1: 100, 2: 100, 4: 100, 16: 100}, spread),
        variant("K=1", 1, {1: 101.5, 2: 120, 4: 100.5, 16: 80}, spread),
        variant("K=3", 3, {1: 150, 2: 110, 4: 99.8, 16: 60}, spread),
    ]
    d = decide_matrix(variants)
    schedule = derive_schedule([Variant(v.curve, v.draft_length) for v in variants], margin=0.02)
    assert d.steps == schedule.steps()


def test_a_gain_inside_the_margin_does_not_beat_the_simpler_variant() -> None:
    variants = [
        Variant(variant("off", 0, {1: 100}, 0.001).curve, 0),
        Variant(variant("K=1", 1, {1: 101}, 0.001).curve, 1),
    ]
    assert derive_schedule(variants).steps()[0].draft_length == 1  # margin 0: conclusive
    assert derive_schedule(variants, margin=0.02).steps()[0].draft_length == 0
