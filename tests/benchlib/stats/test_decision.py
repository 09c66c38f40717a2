from __future__ import annotations

import pytest

from benchlib.stats.decision import WITHIN_RUN, Arm, ArmHealth, LevelEvidence
from benchlib.stats.decision_rule import decide, decide_curves
from benchlib.stats.types import Curve, LevelSample, Ratio, RatioMethod

BASE = Arm("baseline", "A", speculative=False, engine="llamacpp")
SPEC = Arm("eagle3", "B", speculative=True, engine="llamacpp")


def r(point: float, low: float | None = None, high: float | None = None, **kw: object) -> Ratio:
    method: RatioMethod = kw.pop("method", "repeats-log-t" if low is not None else "none")  # type: ignore[assignment]
    refused = str(kw.pop("refused", ""))
    return Ratio(point, low, high, method, 0.95, refused=refused)


def levels(*specs: tuple[int, Ratio], repeats: int = 3) -> list[LevelEvidence]:
    return [LevelEvidence(c, ratio, repeats=repeats) for c, ratio in specs]


def statuses(decision: object) -> list[tuple[int, str]]:
    return [(lv.concurrency, lv.status) for lv in decision.levels]  # type: ignore[attr-defined]


def test_ahead_then_behind_crosses_once_and_recommends_the_engine_threshold() -> None:
    d = decide(
        reference=BASE,
        candidate=SPEC,
        levels=levels(
            (1, r(1.30, 1.25, 1.35)),
            (2, r(1.10, 1.05, 1.15)),
            (4, r(0.90, 0.86, 0.94)),
            (8, r(0.70, 0.66, 0.74)),
        ),
    )
    assert statuses(d) == [(1, "ahead"), (2, "ahead"), (4, "behind"), (8, "behind")]
    assert [(c.lower_level, c.upper_level, c.direction) for c in d.crossovers] == [
        (2, 4, "falls-behind")
    ]
    assert 2 < d.crossovers[0].at < 4
    assert [(b.start, b.end, b.action) for b in d.bands] == [(1, 2, "on"), (3, None, "off")]
    assert d.engine_options and all(o.engine == "llama.cpp" for o in d.engine_options)
    assert "on up to C=2, off above" in d.recommendation
    assert "--spec-type none on the server for loads above C=2" in d.recommendation
    assert "margin ±2%, 95% confidence" in d.recommendation
    assert d.statements()[0] == d.summary and d.statements()[-1] == d.recommendation


def test_all_ahead_keeps_speculation_on() -> None:
    d = decide(
        reference=BASE,
        candidate=SPEC,
        levels=levels((1, r(1.3, 1.2, 1.4)), (4, r(1.1, 1.05, 1.15))),
    )
    assert statuses(d) == [(1, "ahead"), (4, "ahead")]
    assert d.crossovers == ()
    assert [(b.start, b.end, b.action) for b in d.bands] == [(1, None, "on")]
    assert d.recommendation.startswith("Recommendation: keep speculation on (B (eagle3))")
    assert "llama.cpp: --spec-type, --spec-draft-n-max" in d.recommendation


def test_all_equivalent_serves_the_simpler_server() -> None:
    d = decide(
        reference=BASE,
        candidate=SPEC,
        levels=levels((1, r(1.005, 0.99, 1.018)), (2, r(0.997, 0.985, 1.01))),
    )
    assert statuses(d) == [(1, "equivalent"), (2, "equivalent")]
    assert [b.action for b in d.bands] == ["off"]
    assert d.recommendation.startswith("Recommendation: serve without speculation")
    assert "inside 1 ± 2%" in d.levels[0].sentence


def test_a_conclusive_difference_smaller_than_the_margin_is_equivalent() -> None:
    d = decide(reference=BASE, candidate=SPEC, levels=levels((1, r(1.01, 1.005, 1.015))))
    assert statuses(d) == [(1, "equivalent")]


def test_an_interval_crossing_one_outside_the_margin_is_inconclusive() -> None:
    d = decide(
        reference=BASE,
        candidate=SPEC,
        levels=levels((1, r(1.2, 1.1, 1.3)), (2, r(1.01, 0.95, 1.07))),
    )
    assert statuses(d) == [(1, "ahead"), (2, "inconclusive")]
    assert "contains 1 and is not inside 1 ± 2%" in d.levels[1].reason
    assert [(b.start, b.end, b.action) for b in d.bands] == [(1, 1, "on"), (2, None, "none")]
    assert "no recommendation yet" in d.bands[1].sentence
    assert d.recommendation.startswith(
        "Recommendation by band (B (eagle3)) (llama.cpp: --spec-type, --spec-draft-n-max): "
        "C=1 speculation on; C=2 and above no recommendation yet"
    )


def test_points_without_interval_give_no_recommendation() -> None:
    # The case: 1.005 / 0.997 / 0.997 with no interval once read as
    # "disable speculation above C=1".
    d = decide(
        reference=BASE,
        candidate=SPEC,
        levels=levels((1, r(1.005)), (2, r(0.997)), (4, r(0.997)), repeats=1),
    )
    assert statuses(d) == [(1, "inconclusive"), (2, "inconclusive"), (4, "inconclusive")]
    assert all(lv.reason == "no interval (one figure per arm)" for lv in d.levels)
    assert d.crossovers == ()
    assert d.engine_options == ()
    assert d.recommendation == (
        "No recommendation yet: no level is conclusive (llama.cpp: --spec-type, "
        "--spec-draft-n-max); margin ±2%, 95% confidence."
    )
    assert not any("disable" in s or "faster" in s or "slower" in s for s in d.statements())


def test_a_refused_interval_is_inconclusive_with_its_reason() -> None:
    refused = r(1.3, refused="the interval 1.4-1.5 does not contain the point 1.3")
    d = decide(reference=BASE, candidate=SPEC, levels=levels((1, refused)))
    assert statuses(d) == [(1, "inconclusive")]
    assert d.levels[0].reason.startswith("interval refused: the interval 1.4-1.5")


def test_ratio_sign_needs_an_interval() -> None:
    assert r(1.5).sign == 0
    assert r(0.5).sign == 0
    assert r(1.5, refused="x").sign == 0
    assert r(1.5, 1.2, 1.7).sign == 1
    assert r(0.5, 0.4, 0.6).sign == -1


@pytest.mark.parametrize(
    ("reference", "candidate", "reason"),
    [
        (
            ArmHealth(workload="w1"),
            ArmHealth(workload="w2"),
            "the two arms ran different workloads",
        ),
        (
            ArmHealth(client_limited=True),
            ArmHealth(),
            "A (baseline)'s load generator was the bottleneck (client-limited)",
        ),
        (
            ArmHealth(),
            ArmHealth(client_limited=True, client_warning="event-loop stall 420 ms (max)"),
            "B (eagle3)'s load generator was the bottleneck (client-limited: event-loop stall "
            "420 ms (max))",
        ),
        (
            ArmHealth(),
            ArmHealth(load_source_starved=True),
            "B (eagle3)'s load source fell behind (starved)",
        ),
        (
            ArmHealth(),
            ArmHealth(achieved_concurrency=7.75),
            "B (eagle3) reached C=7.75, below 80% of the asked C=64",
        ),
        (
            ArmHealth(requests=100, failed=5),
            ArmHealth(requests=100),
            "5.0% of A (baseline)'s requests failed (5 of 100; the limit is 1%)",
        ),
    ],
)
def test_unhealthy_levels_are_not_comparable(
    reference: ArmHealth, candidate: ArmHealth, reason: str
) -> None:
    ev = LevelEvidence(64, r(1.5, 1.4, 1.6), repeats=3, reference=reference, candidate=candidate)
    d = decide(reference=BASE, candidate=SPEC, levels=[ev])
    assert statuses(d) == [(64, "not_comparable")]
    assert d.levels[0].reason == reason
    assert reason in d.levels[0].sentence
    assert [b.action for b in d.bands] == ["none"]


def test_cancelled_requests_are_not_failures_and_healthy_levels_stay_comparable() -> None:
    health = ArmHealth(requests=100, failed=1, cancelled=40, achieved_concurrency=60.0)
    ev = LevelEvidence(64, r(1.5, 1.4, 1.6), repeats=3, reference=health, candidate=health)
    d = decide(reference=BASE, candidate=SPEC, levels=[ev])
    assert statuses(d) == [(64, "ahead")]


def test_achieved_concurrency_is_not_checked_at_a_fixed_rate() -> None:
    ev = LevelEvidence(
        64, r(1.5, 1.4, 1.6), candidate=ArmHealth(achieved_concurrency=3.0), repeats=3
    )
    d = decide(reference=BASE, candidate=SPEC, levels=[ev], figure="tpot_p50_ms", rate_mode=True)
    assert statuses(d) == [(64, "behind")]  # a latency ratio of 1.5 means B is slower


def test_drift_above_the_margin_makes_a_level_inconclusive() -> None:
    ev = LevelEvidence(1, r(1.3, 1.2, 1.4), repeats=3, drift=0.035)
    d = decide(reference=BASE, candidate=SPEC, levels=[ev])
    assert statuses(d) == [(1, "inconclusive")]
    assert "drift of 3.5%" in d.levels[0].reason
    ok = decide(
        reference=BASE, candidate=SPEC, levels=[LevelEvidence(1, r(1.3, 1.2, 1.4), drift=0.01)]
    )
    assert statuses(ok) == [(1, "ahead")]


def test_crossover_only_between_adjacent_ahead_and_behind_levels() -> None:
    d = decide(
        reference=BASE,
        candidate=SPEC,
        levels=levels((1, r(1.2, 1.1, 1.3)), (2, r(1.0, 0.9, 1.1)), (4, r(0.8, 0.7, 0.9))),
    )
    assert statuses(d) == [(1, "ahead"), (2, "inconclusive"), (4, "behind")]
    assert d.crossovers == ()
    assert [(b.start, b.end, b.action) for b in d.bands] == [
        (1, 1, "on"),
        (2, 2, "none"),
        (3, None, "off"),  # the untested C=3 goes to "off": switch on only where shown
    ]


def test_a_bootstrap_interval_says_it_leaves_out_run_to_run_variance() -> None:
    boot = r(1.3, 1.2, 1.4, method="bootstrap-requests")
    d = decide(reference=BASE, candidate=SPEC, levels=levels((1, boot), repeats=1))
    assert d.within_run
    assert WITHIN_RUN in d.levels[0].sentence
    assert WITHIN_RUN in d.summary
    repeats = decide(reference=BASE, candidate=SPEC, levels=levels((1, r(1.3, 1.2, 1.4))))
    assert not repeats.within_run
    assert not any(WITHIN_RUN in s for s in repeats.statements())


def test_speculative_reference_reads_the_other_way() -> None:
    d = decide(
        reference=SPEC,
        candidate=BASE,
        levels=levels((1, r(0.8, 0.75, 0.85)), (8, r(1.2, 1.1, 1.3))),
    )
    assert statuses(d) == [(1, "behind"), (8, "ahead")]
    assert [(b.start, b.end, b.action) for b in d.bands] == [(1, 1, "on"), (2, None, "off")]
    assert "speculation (B (eagle3)) on up to C=1, off above" in d.recommendation


def test_no_speculation_recommendation_when_both_arms_are_alike() -> None:
    d = decide(
        reference=BASE,
        candidate=Arm("other", "B"),
        levels=levels((1, r(1.3, 1.2, 1.4))),
    )
    assert d.bands == ()
    assert d.recommendation.startswith("No speculation recommendation")


def test_rate_mode_refuses_throughput() -> None:
    with pytest.raises(ValueError, match="offered rate"):
        decide(
            reference=BASE,
            candidate=SPEC,
            levels=levels((1, r(1.03, 1.022, 1.037))),
            figure="output_tok_s",
            rate_mode=True,
        )


def test_rate_mode_reports_a_two_fold_tpot_difference_on_latency() -> None:
    # Two simulators at 3 req/s, TPOT 20.2 vs 10.2 ms: throughput is the offered rate
    # (B/A = 1.030), latency is where they differ.
    slow = Curve("slow", [LevelSample.from_repeats(4, [20.1, 20.2, 20.3])])
    fast = Curve("fast", [LevelSample.from_repeats(4, [10.1, 10.2, 10.3])])
    d = decide_curves(
        slow,
        fast,
        figure="tpot_p50_ms",
        rate_mode=True,
        arms=(Arm("slow", "A"), Arm("fast", "B")),
    )
    level = d.levels[0]
    assert level.status == "ahead"
    assert level.ratio.point == pytest.approx(20.2 / 10.2)
    assert 1.9 < level.ratio.low < level.ratio.point < level.ratio.high < 2.1  # type: ignore[operator]
    assert "TPOT p50 1.980x (TPOT p50 lower is better: A/B)" in level.sentence
    assert "fixed request rate" in d.summary and "on TPOT p50" in d.summary
    assert not any("1.030" in s or "3.0%" in s or "faster" in s for s in d.statements())


def test_unknown_figure_and_margin_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown figure"):
        decide(reference=BASE, candidate=SPEC, levels=[], figure="tok")
    with pytest.raises(ValueError, match="margin"):
        decide(reference=BASE, candidate=SPEC, levels=[], margin=1.5)


def test_to_dict_carries_every_statement() -> None:
    d = decide(
        reference=BASE,
        candidate=SPEC,
        levels=levels((1, r(1.2, 1.1, 1.3)), (2, r(0.8, 0.7, 0.9))),
    )
    out = d.to_dict()
    assert out["statements"] == list(d.statements())
    assert [lv["status"] for lv in out["levels"]] == ["ahead", "behind"]
    assert out["margin"] == 0.02 and out["confidence"] == 0.95


# The contradictions the issue found, as regressions: one object cannot say both.


def test_regression_verification_does_not_keep_speculation_on_at_084x() -> None:
    d = decide(
        reference=Arm("off", "A"),
        candidate=Arm("K=1", "B", speculative=True),
        levels=levels((1, r(1.15, 1.1, 1.2)), (16, r(0.84, 0.8, 0.88))),
    )
    assert d.level(16).status == "behind"  # type: ignore[union-attr]
    assert "keep speculation on" not in d.recommendation
    assert "on up to C=1, off above" in d.recommendation


def test_regression_compare_sweeps_does_not_keep_it_on_at_051x() -> None:
    d = decide(
        reference=BASE,
        candidate=SPEC,
        levels=levels((1, r(1.4, 1.3, 1.5)), (2, r(1.1, 1.05, 1.15)), (64, r(0.51, 0.48, 0.54))),
    )
    assert "keep" not in d.recommendation
    assert d.bands[-1].action == "off" and d.bands[-1].end is None


def test_the_why_line_says_the_latency_trade_off_and_where_throughput_turns() -> None:
    # EAGLE-3 as the walkthrough shows it: ITL lower, TTFT higher (the drafter's prefill),
    # ahead at C=1-2 and behind from C=4.
    latency = {
        1: ({"itl_p50_ms": 10.8, "ttft_p50_ms": 14.0}, {"itl_p50_ms": 7.0, "ttft_p50_ms": 29.5}),
        2: ({"itl_p50_ms": 11.0, "ttft_p50_ms": 15.0}, {"itl_p50_ms": 9.0, "ttft_p50_ms": 30.0}),
    }
    evidence = [
        LevelEvidence(c, ratio, repeats=3, latency=latency.get(c))
        for c, ratio in (
            (1, r(1.30, 1.25, 1.35)),
            (2, r(1.10, 1.05, 1.15)),
            (4, r(0.90, 0.86, 0.94)),
        )
    ]
    d = decide(reference=BASE, candidate=SPEC, levels=evidence)
    assert d.why == (
        "Why: at C=1 against A (baseline), B (eagle3)'s ITL p50 is 35% lower and its TTFT p50 "
        "is 2.1x higher; on output throughput it is ahead up to C=2 and behind from C=4."
    )
    assert d.statements()[1] == d.why
    assert d.to_dict()["why"] == d.why
    # Without latency figures there is no line, and no empty statement.
    plain = decide(reference=BASE, candidate=SPEC, levels=levels((1, r(1.30, 1.25, 1.35))))
    assert plain.why == "" and "" not in plain.statements()
