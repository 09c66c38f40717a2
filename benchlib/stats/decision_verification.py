"""The decision of a schedule verification: the tuned schedule against every fixed variant it
was derived from, each pair decided by ``decision_rule.decide`` (tuned the candidate, the fixed
variant the reference), and the verdict said once here.

A fixed variant is *ahead of the schedule* at a level exactly when the pair's status there is
``behind`` (tuned / fixed wholly below 1 and not inside 1 +/- margin); the schedule passes when
no fixed variant is ahead of it at any level both measured. A level whose pair is
``not_comparable`` or ``inconclusive`` is named with its reason, never counted as a pass or a
failure on its own. ``equivalent`` with an interval wholly below 1 is "behind within the
margin" (only possible with a margin above 0).

Where the schedule's decision predicted, before the run, what a switch point costs a level
(``switch_costs``: its turnarounds run the other variant's step), the verdict puts that
prediction beside the measured ratio against the same fixed variant, so a loss that was a
known trade-off reads as one. The prediction never changes a status or the verdict's pass.

The margin defaults to 0 (``VERIFY_MARGIN``): a verification runs each level several times by
default, so its intervals already hold the run-to-run spread, and a schedule that is
conclusively behind a fixed choice by any amount fails. Neither arm is treated as "the
speculative one": a verification asks whether the schedule is at least as good as each fixed
choice, not whether to switch speculation on, so no pair carries a speculation recommendation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchlib.stats.decision import Arm, ArmHealth, Decision, conditions
from benchlib.stats.decision_rule import decide_curves
from benchlib.stats.intervals import DEFAULT_CONFIDENCE
from benchlib.stats.types import Curve, Ratio

VERIFY_MARGIN = 0.0


@dataclass(frozen=True)
class Predicted:
    """Schedule / ``fixed`` at ``concurrency`` as the schedule's decision predicted it."""

    concurrency: int
    fixed: str  # the fixed variant's name: the level's own variant in the schedule
    ratio: float
    cause: str  # "its turnarounds run the K=1 step"

    @classmethod
    def from_switch_cost(cls, cost: Mapping[str, Any]) -> Predicted | None:
        """From a ``SwitchCost`` as stored (its dict); None where nothing was predicted."""
        if cost.get("predicted_ratio") is None:
            return None
        return cls(
            int(cost["concurrency"]),
            str(cost["own"]),
            float(cost["predicted_ratio"]),
            f"its turnarounds run the {cost['turnaround_label']} step at batch {cost['batch']}",
        )


@dataclass(frozen=True)
class VerificationLevel:
    concurrency: int
    best_fixed: str  # the fixed variant tuned is furthest behind (lowest tuned / fixed point)
    ratio: Ratio  # tuned / best fixed
    ahead_of_tuned: tuple[str, ...]  # fixed variants whose pair says tuned is behind
    behind_within_margin: tuple[str, ...]
    undecided: tuple[str, ...]  # "name: reason" for inconclusive / not comparable pairs
    ok: bool
    predicted: Predicted | None = None  # what the schedule's decision predicted here


@dataclass(frozen=True)
class VerificationDecision:
    tuned: str
    fixed: tuple[str, ...]
    margin: float
    confidence: float
    pairwise: tuple[Decision, ...]  # tuned against each fixed variant, in ``fixed`` order
    levels: tuple[VerificationLevel, ...]
    ok: bool
    verdict: str

    def statements(self) -> tuple[str, ...]:
        return (self.verdict, *(s for d in self.pairwise for s in d.statements()))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        out["pairwise"] = [d.to_dict() for d in self.pairwise]
        out["statements"] = list(self.statements())
        return out


def _fmt(ratio: Ratio) -> str:
    if ratio.low is None or ratio.high is None:
        return f"{ratio.point:.3f}x, no interval"
    return f"{ratio.point:.3f}x, {ratio.confidence:.0%} {ratio.low:.3f}-{ratio.high:.3f}x"


def _measured(ratio: Ratio) -> str:
    if ratio.low is None or ratio.high is None:
        return f"{ratio.point:.3f} (no interval)"
    return f"{ratio.point:.3f} ({ratio.confidence:.0%} {ratio.low:.3f}-{ratio.high:.3f})"


def verification_from(
    tuned: str,
    pairwise: Sequence[Decision],
    *,
    margin: float,
    confidence: float = DEFAULT_CONFIDENCE,
    predicted: Sequence[Predicted] = (),
) -> VerificationDecision:
    """The verification's levels and verdict from the pairs' decisions (each with tuned as
    the candidate); ``predicted`` the schedule's predicted ratios, set beside the measured."""
    foretold = {p.concurrency: p for p in predicted}
    beside: list[str] = []
    concurrencies = sorted({lv.concurrency for d in pairwise for lv in d.levels})
    levels: list[VerificationLevel] = []
    failing: list[str] = []
    close: list[str] = []
    undecided_text: list[str] = []
    for c in concurrencies:
        present = [(d.reference.name, lv) for d in pairwise if (lv := d.level(c)) is not None]
        best, best_level = min(present, key=lambda item: item[1].ratio.point)
        ahead = tuple(name for name, lv in present if lv.status == "behind")
        within = tuple(
            name
            for name, lv in present
            if lv.status == "equivalent" and lv.ratio.high is not None and lv.ratio.high < 1.0
        )
        undecided = tuple(
            f"{name}: {lv.reason}"
            for name, lv in present
            if lv.status in ("inconclusive", "not_comparable")
        )
        by_name = dict(present)
        guess = foretold.get(c)
        if guess is not None and guess.fixed in by_name:
            beside.append(
                f"C={c} against {guess.fixed}: predicted {guess.ratio:.3f} ({guess.cause}), "
                f"measured {_measured(by_name[guess.fixed].ratio)}"
            )
        else:
            guess = None
        levels.append(
            VerificationLevel(c, best, best_level.ratio, ahead, within, undecided, not ahead, guess)
        )
        if ahead:
            failing.append(f"C={c} ({'; '.join(f'{n}: {_fmt(by_name[n].ratio)}' for n in ahead)})")
        if within:
            close.append(f"C={c} ({'; '.join(f'{n}: {_fmt(by_name[n].ratio)}' for n in within)})")
        if undecided:
            undecided_text.append(f"C={c} ({'; '.join(undecided)})")
    cond = conditions(margin, confidence)
    if not levels:
        verdict = "No level was measured by the tuned arm and a fixed variant: no verdict."
    elif not failing:
        verdict = (
            "The schedule is at least as good as every fixed choice at every level: no fixed "
            f"variant is conclusively ahead of it ({cond})."
        )
    else:
        verdict = (
            "The schedule is not at least as good as every fixed choice: conclusively behind at "
            + ", ".join(failing)
            + f" (tuned / fixed wholly below 1 and not inside 1 ± margin; {cond})."
        )
    if close:
        verdict += (
            f" Behind within the margin (wholly below 1, inside 1 ± {margin:.0%}): "
            + ", ".join(close)
            + "."
        )
    if beside:
        verdict += (
            " Predicted by the schedule's decision before this run (a switch point's cost to "
            "the level above it): " + "; ".join(beside) + "."
        )
    if undecided_text:
        verdict += " Not decided: " + ", ".join(undecided_text) + "."
    if any(d.within_run for d in pairwise):
        verdict += " Some intervals are within-run: they leave out run-to-run variance."
    return VerificationDecision(
        tuned=tuned,
        fixed=tuple(d.reference.name for d in pairwise),
        margin=margin,
        confidence=confidence,
        pairwise=tuple(pairwise),
        levels=tuple(levels),
        ok=bool(levels) and not failing,
        verdict=verdict,
    )


def decide_verification(
    tuned: Curve,
    fixed: Sequence[Curve],
    *,
    margin: float = VERIFY_MARGIN,
    confidence: float = DEFAULT_CONFIDENCE,
    health: dict[str, dict[int, ArmHealth]] | None = None,
    predicted: Sequence[Predicted] = (),
) -> VerificationDecision:
    """``tuned`` against each of ``fixed`` on their throughput curves (``decide_curves``);
    ``health`` maps a curve's name to its levels' health, ``predicted`` the schedule
    decision's predicted ratios (set beside the measured ones)."""
    by_name = health or {}
    pairwise = []
    for curve in fixed:
        ref, cand = by_name.get(curve.name, {}), by_name.get(tuned.name, {})
        pair_health = {
            c: (ref.get(c, ArmHealth()), cand.get(c, ArmHealth())) for c in {*ref, *cand}
        }
        pairwise.append(
            decide_curves(
                curve,
                tuned,
                margin=margin,
                confidence=confidence,
                health=pair_health,
                arms=(Arm(curve.name, engine=curve.engine), Arm(tuned.name, engine=tuned.engine)),
            )
        )
    return verification_from(
        tuned.name, pairwise, margin=margin, confidence=confidence, predicted=predicted
    )
