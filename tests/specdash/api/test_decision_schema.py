"""The API's decision schema is the decision object's own shape: every field the producer
writes is declared, with its type, and nothing is lost on the way out."""

from __future__ import annotations

from typing import Any

import pytest

from benchlib.stats.decision import Arm, ArmHealth, Decision, LevelEvidence
from benchlib.stats.decision_rule import decide
from benchlib.stats.types import Ratio, RatioMethod
from specdash.api.schemas.decisions import DecisionOut


def _r(point: float, low: float | None = None, high: float | None = None) -> Ratio:
    method: RatioMethod = "repeats-log-t" if low is not None else "none"
    return Ratio(point=point, low=low, high=high, method=method, confidence=0.95)


def _ahead_then_behind() -> Decision:
    return decide(
        reference=Arm("base", "A", False, "vllm"),
        candidate=Arm("eagle", "B", True, "vllm"),
        levels=[
            LevelEvidence(1, _r(1.20, 1.15, 1.25), repeats=3),
            LevelEvidence(4, _r(0.80, 0.75, 0.85), repeats=3),
            LevelEvidence(16, _r(0.70, 0.65, 0.75), repeats=3),
        ],
    )


def _unsettled() -> Decision:
    # Points below 1 at the top, but no interval and a client-limited level: nothing settles.
    return decide(
        reference=Arm("base"),
        candidate=Arm("eagle", speculative=True),
        levels=[
            LevelEvidence(1, _r(1.1, 1.05, 1.15), repeats=2),
            LevelEvidence(2, _r(0.9), repeats=1),
            LevelEvidence(
                8,
                _r(0.8, 0.75, 0.85),
                candidate=ArmHealth(requests=8, client_limited=True, client_warning="loop stall"),
            ),
        ],
    )


def _rate_mode() -> Decision:
    return decide(
        reference=Arm("a"),
        candidate=Arm("b", speculative=True),
        levels=[LevelEvidence(1, Ratio(0.5, 0.48, 0.52, "bootstrap-requests", 0.95))],
        figure="tpot_p50_ms",
        rate_mode=True,
    )


@pytest.mark.parametrize("build", [_ahead_then_behind, _unsettled, _rate_mode])
def test_every_field_of_the_decision_is_declared_and_round_trips(build: Any) -> None:
    produced = build().to_dict()
    assert DecisionOut.model_validate(produced).model_dump() == produced


def test_behind_and_ahead_from_come_from_the_statuses_not_the_points() -> None:
    d = _ahead_then_behind()
    assert (d.behind_from, d.ahead_from) == (4, None)
    assert d.to_dict()["behind_from"] == 4
    unsettled = _unsettled()
    assert [lv.status for lv in unsettled.levels] == ["ahead", "inconclusive", "not_comparable"]
    # Every point from C=2 on is below 1; the statuses say nothing is shown there.
    assert (unsettled.behind_from, unsettled.ahead_from) == (None, None)
    all_ahead = decide(
        reference=Arm("a"),
        candidate=Arm("b"),
        levels=[LevelEvidence(c, _r(1.2, 1.1, 1.3), repeats=2) for c in (1, 2)],
    )
    assert (all_ahead.behind_from, all_ahead.ahead_from) == (None, 1)


def test_a_status_outside_the_declared_ones_is_refused() -> None:
    produced = _ahead_then_behind().to_dict()
    produced["levels"][0]["status"] = "faster"
    with pytest.raises(ValueError, match="status"):
        DecisionOut.model_validate(produced)
