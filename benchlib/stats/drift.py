"""Drift and order effect of one level of a repeated experiment.

An experiment runs each arm several times, each run a fresh server start, in a planned order
(A B B A by default). Two things can bias B/A that the interval of the repeats does not name:

``drift``: the machine changes while the experiment runs (thermal state, other tenants, a
background job), so the same arm measures differently at its first and its last run. It is
reported per arm as ``last / first - 1`` of the level's figure, with the runs' positions in
the experiment. A drift larger than the margin of practical equivalence means the level's
conclusion could be the machine's, not the arms': ``LevelDrift.exceeds(margin)`` says so and
``reason(margin)`` says why, so that the decision can hold the level *inconclusive*.

``order effect``: running second (a warm page cache, a GPU still clocked up by the previous
server) can favour whichever arm follows. With runs paired by repeat (A's and B's run of
repeat r), the order effect is the geometric mean of B/A over the pairs where A ran first,
divided by that over the pairs where B ran first, minus 1; it needs at least one pair of each
(A B B A has one of each). 0 means no order effect; +3% means B/A reads 3% higher when B runs
second. A B B A balances it out of the repeats' mean; it is reported so that a large one is
seen, not corrected.

Plain Python, no Django: the experiment's selectors build the ``Run`` values from its steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Run:
    """One arm's figure at one level from one run (a step of the experiment)."""

    position: int  # the run's place in the experiment's order (the step index)
    arm: str
    repeat: int
    value: float

    def __post_init__(self) -> None:
        if not self.value > 0 or not math.isfinite(self.value):
            raise ValueError(f"run {self.position} ({self.arm}): value must be > 0 and finite")


@dataclass(frozen=True)
class ArmDrift:
    arm: str
    runs: int
    first: float
    last: float
    first_position: int
    last_position: int

    @property
    def change(self) -> float:
        """``last / first - 1``: the arm's own change over the experiment at this level."""
        return self.last / self.first - 1.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "arm": self.arm,
            "runs": self.runs,
            "first": self.first,
            "last": self.last,
            "first_position": self.first_position,
            "last_position": self.last_position,
            "change": self.change,
        }


@dataclass(frozen=True)
class LevelDrift:
    concurrency: int
    reference: str
    candidate: str
    arms: tuple[ArmDrift, ...]  # the arms with two runs or more
    order_effect: float | None  # see the module notes; None without a pair of each order
    reference_first_pairs: int
    candidate_first_pairs: int

    def largest(self) -> ArmDrift | None:
        """The arm whose drift is largest in size (None when no arm ran twice)."""
        return max(self.arms, key=lambda d: abs(d.change), default=None)

    @property
    def size(self) -> float | None:
        """The largest drift of an arm, in size (None when no arm ran twice): what the decision
        compares with its margin."""
        largest = self.largest()
        return None if largest is None else abs(largest.change)

    def exceeds(self, margin: float) -> bool:
        """True when some arm drifted by more than ``margin`` between its first and last run."""
        largest = self.largest()
        return largest is not None and abs(largest.change) > margin

    def reason(self, margin: float) -> str:
        """Why the level is held inconclusive ("" when its drift is within ``margin``)."""
        largest = self.largest()
        if largest is None or abs(largest.change) <= margin:
            return ""
        return (
            f"{largest.arm} drifted {largest.change:+.1%} between its first and last run "
            f"(runs {largest.first_position + 1} and {largest.last_position + 1}), more than "
            f"the margin of {margin:.1%}"
        )

    def as_dict(self) -> dict[str, Any]:
        largest = self.largest()
        return {
            "concurrency": self.concurrency,
            "reference": self.reference,
            "candidate": self.candidate,
            "arms": [d.as_dict() for d in self.arms],
            "largest_drift": None if largest is None else largest.change,
            "drift": self.size,
            "order_effect": self.order_effect,
            "reference_first_pairs": self.reference_first_pairs,
            "candidate_first_pairs": self.candidate_first_pairs,
        }


def _geomean(values: Sequence[float]) -> float:
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def level_drift(
    concurrency: int, runs: Sequence[Run], *, reference: str, candidate: str
) -> LevelDrift:
    """Drift of every arm in ``runs`` and the order effect of ``candidate`` against
    ``reference`` at one level (see the module notes)."""
    by_arm: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda r: r.position):
        by_arm.setdefault(run.arm, []).append(run)
    arms = tuple(
        ArmDrift(
            arm=arm,
            runs=len(own),
            first=own[0].value,
            last=own[-1].value,
            first_position=own[0].position,
            last_position=own[-1].position,
        )
        for arm, own in by_arm.items()
        if len(own) >= 2
    )
    ref = {r.repeat: r for r in by_arm.get(reference, [])}
    cand = {r.repeat: r for r in by_arm.get(candidate, [])}
    ref_first: list[float] = []
    cand_first: list[float] = []
    for repeat in sorted(ref.keys() & cand.keys()):
        a, b = ref[repeat], cand[repeat]
        (ref_first if a.position < b.position else cand_first).append(b.value / a.value)
    order_effect = (
        _geomean(ref_first) / _geomean(cand_first) - 1.0 if ref_first and cand_first else None
    )
    return LevelDrift(
        concurrency=concurrency,
        reference=reference,
        candidate=candidate,
        arms=arms,
        order_effect=order_effect,
        reference_first_pairs=len(ref_first),
        candidate_first_pairs=len(cand_first),
    )


def experiment_drift(levels: Sequence[LevelDrift]) -> float | None:
    """The machine's drift over the experiment: per arm, the geometric mean over the levels of
    its ``last / first``, minus 1; the largest in size over the arms (None when no arm ran
    twice). What the decision compares with the margin at every level.

    Why not each level's own drift: with two runs per arm a level's ``last / first`` is one
    ratio of two runs, so it carries the whole run-to-run noise (sd sqrt(2) x a run's), which
    the level's interval already holds; at 1% run-to-run noise it exceeds a 2% margin at about
    30% of the levels of two identical servers. A machine that drifts slows or speeds every
    level of the later runs, so the levels' mean shows it with the noise divided by sqrt(levels);
    a change at one level alone cannot be told from that level's noise, which its interval
    carries. The per-level drifts stay reported beside it.
    """
    logs: dict[str, list[float]] = {}
    for level in levels:
        for arm in level.arms:
            logs.setdefault(arm.arm, []).append(math.log(arm.last / arm.first))
    if not logs:
        return None
    return max(abs(math.exp(math.fsum(v) / len(v)) - 1.0) for v in logs.values())
