"""Drift (an arm's first vs last run) and the order effect, on synthetic repeats."""

from __future__ import annotations

import pytest

from benchlib.stats.drift import Run, experiment_drift, level_drift


def _abba(a: tuple[float, float], b: tuple[float, float]) -> list[Run]:
    """A B B A: A's repeat 0 first, B's repeat 0, B's repeat 1, A's repeat 1 last."""
    return [
        Run(0, "A", 0, a[0]),
        Run(1, "B", 0, b[0]),
        Run(2, "B", 1, b[1]),
        Run(3, "A", 1, a[1]),
    ]


def test_a_steady_machine_has_no_drift_and_no_order_effect() -> None:
    drift = level_drift(4, _abba((100.0, 100.0), (90.0, 90.0)), reference="A", candidate="B")
    assert [d.change for d in drift.arms] == [0.0, 0.0]
    assert drift.order_effect == pytest.approx(0.0)
    assert (drift.reference_first_pairs, drift.candidate_first_pairs) == (1, 1)
    assert not drift.exceeds(0.0) and drift.reason(0.0) == ""


def test_a_machine_slowing_down_shows_as_each_arms_drift_and_over_the_margin() -> None:
    # 2% slower per run, at the positions 0, 1, 2, 3: B = 0.9 A throughout.
    factor = [1.0, 0.98, 0.96, 0.94]
    runs = _abba((100 * factor[0], 100 * factor[3]), (90 * factor[1], 90 * factor[2]))
    drift = level_drift(8, runs, reference="A", candidate="B")
    by_arm = {d.arm: d for d in drift.arms}
    assert by_arm["A"].change == pytest.approx(-0.06)
    assert by_arm["B"].change == pytest.approx(0.96 / 0.98 - 1)
    assert drift.largest() is by_arm["A"] and drift.size == pytest.approx(0.06)
    assert drift.exceeds(0.05) and not drift.exceeds(0.07)
    assert drift.reason(0.05) == (
        "A drifted -6.0% between its first and last run (runs 1 and 4), more than the margin "
        "of 5.0%"
    )
    assert drift.reason(0.07) == ""
    # Pair 0 had A first (B/A = 0.9 * 0.98), pair 1 had B first (B/A = 0.9 * 0.96 / 0.94).
    assert drift.order_effect == pytest.approx(0.98 / (0.96 / 0.94) - 1)


def test_running_second_favoured_shows_as_the_order_effect_not_as_drift() -> None:
    # Whichever arm runs second in its pair gets +4%; the machine is otherwise steady.
    runs = [
        Run(0, "A", 0, 100.0),
        Run(1, "B", 0, 104.0),  # second in pair 0
        Run(2, "B", 1, 100.0),  # first in pair 1
        Run(3, "A", 1, 104.0),  # second in pair 1
    ]
    drift = level_drift(1, runs, reference="A", candidate="B")
    assert drift.order_effect == pytest.approx(1.04 / (1 / 1.04) - 1)
    by_arm = {d.arm: d.change for d in drift.arms}
    assert by_arm == {"A": pytest.approx(0.04), "B": pytest.approx(100 / 104 - 1)}


def test_a_single_run_per_arm_has_no_drift_and_sequential_order_no_order_effect() -> None:
    single = level_drift(1, [Run(0, "A", 0, 100.0), Run(1, "B", 0, 95.0)], reference="A",
                         candidate="B")  # fmt: skip
    assert single.arms == () and single.largest() is None and not single.exceeds(0.0)
    assert single.size is None and single.as_dict()["drift"] is None
    assert single.order_effect is None and single.reference_first_pairs == 1
    sequential = [Run(0, "A", 0, 100.0), Run(1, "A", 1, 101.0), Run(2, "B", 0, 95.0),
                  Run(3, "B", 1, 96.0)]  # fmt: skip
    drift = level_drift(1, sequential, reference="A", candidate="B")
    assert drift.order_effect is None and drift.candidate_first_pairs == 0
    assert {d.arm: d.runs for d in drift.arms} == {"A": 2, "B": 2}


def test_runs_are_taken_in_their_experiment_order_whatever_order_they_come_in() -> None:
    runs = list(reversed(_abba((100.0, 110.0), (90.0, 90.0))))
    drift = level_drift(2, runs, reference="A", candidate="B")
    (a,) = [d for d in drift.arms if d.arm == "A"]
    assert (a.first, a.last, a.first_position, a.last_position) == (100.0, 110.0, 0, 3)
    assert drift.as_dict()["largest_drift"] == pytest.approx(0.1)


def test_a_run_without_a_positive_figure_is_refused() -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        Run(0, "A", 0, 0.0)


def test_the_experiments_drift_is_the_arms_change_over_all_levels_not_one_levels_noise() -> None:
    # One level whose two A runs differ by 2.5% (run-to-run noise) among three calm ones: that
    # level's own drift exceeds a 2% margin, the machine's does not.
    noisy = {1: {"A": (100.0, 102.5), "B": (100.0, 100.2)}}
    calm = {c: {"A": (100.0, 100.1), "B": (100.0, 99.9)} for c in (2, 4, 8)}
    levels = [
        level_drift(c, _abba(v["A"], v["B"]), reference="A", candidate="B")
        for c, v in (noisy | calm).items()
    ]
    assert levels[0].exceeds(0.02)
    size = experiment_drift(levels)
    assert size is not None and size < 0.02
    # A machine that slows 3% between the first and last run slows every level.
    slowing = [
        level_drift(c, _abba((100.0, 97.0), (100.0, 99.0)), reference="A", candidate="B")
        for c in (1, 2, 4, 8)
    ]
    assert experiment_drift(slowing) == pytest.approx(0.03)
    assert experiment_drift([level_drift(1, [Run(0, "A", 0, 1.0)], reference="A",
                                         candidate="B")]) is None  # fmt: skip
