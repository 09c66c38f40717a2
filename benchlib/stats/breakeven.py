"""The break-even map of one server configuration: B/A (speculative arm at a forced acceptance
against the same server without speculation) over forced accept length x concurrency, each
cell with the decision object's status; the break-even contour and its band; a workload's
measured per-category acceptance placed on it; and a placed prediction checked against a
measured A/B.

The map's cells are the levels of ordinary decisions (``decision.decide_curves`` on one
forced-acceptance arm against the baseline, default protocol), so every status shown here is
the decision's own. Between two tested acceptances the ratio, its interval's low and its high
are each interpolated linearly in accept length: at a fixed batch the verify step's cost does
not depend on how many drafts are accepted, so throughput (tokens per step / step time) is
linear in the accept length and so is B/A. Nothing is extrapolated: an acceptance outside the
tested range gets no prediction. A placed prediction is then decided by ``decision.decide`` on
the carried intervals, so its statuses, crossovers and "behind from" follow the same rules as
a measured comparison's (docs/measurement.md, "The break-even map").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

from benchlib.stats.decision import (
    DEFAULT_MARGIN,
    Arm,
    Decision,
    LevelEvidence,
    Status,
    decide,
)
from benchlib.stats.intervals import DEFAULT_CONFIDENCE
from benchlib.stats.types import Ratio


@dataclass(frozen=True)
class Cell:
    accept_length: float  # the forced accept length (tokens per verify step)
    concurrency: int
    ratio: Ratio  # B/A of output throughput, forced arm over the baseline
    status: Status


@dataclass(frozen=True)
class ContourPoint:
    """Where B/A crosses 1 at one level, in accept length: ``at`` from the points, ``low`` /
    ``high`` where the interval's upper / lower bound crosses 1 (below ``low`` the forced arm
    is shown behind, above ``high`` shown ahead). None where the tested acceptances do not
    bracket the crossing."""

    concurrency: int
    at: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class BreakevenMap:
    reference: str  # the baseline arm's name
    acceptances: tuple[float, ...]  # increasing
    levels: tuple[int, ...]  # increasing, tested by every column
    cells: tuple[Cell, ...]
    margin: float = DEFAULT_MARGIN
    confidence: float = DEFAULT_CONFIDENCE

    def cell(self, accept_length: float, concurrency: int) -> Cell | None:
        return next(
            (
                c
                for c in self.cells
                if c.accept_length == accept_length and c.concurrency == concurrency
            ),
            None,
        )

    def contour(self) -> tuple[ContourPoint, ...]:
        out = []
        for c in self.levels:
            column = [self.cell(a, c) for a in self.acceptances]
            cells = [x for x in column if x is not None]
            out.append(
                ContourPoint(
                    c,
                    _crossing(cells, lambda r: r.point),
                    _crossing(cells, lambda r: r.high),
                    _crossing(cells, lambda r: r.low),
                )
            )
        return tuple(out)

    def predict(self, accept_length: float, concurrency: int) -> Ratio | None:
        """B/A at ``accept_length`` and ``concurrency``, each of point, low and high
        interpolated linearly between the two tested acceptances around it (module notes);
        None outside the tested range or where a bracketing cell has no interval."""
        if concurrency not in self.levels or not self.acceptances:
            return None
        if not self.acceptances[0] <= accept_length <= self.acceptances[-1]:
            return None
        for lo_a, hi_a in pairwise(self.acceptances):
            if lo_a <= accept_length <= hi_a:
                lo, hi = self.cell(lo_a, concurrency), self.cell(hi_a, concurrency)
                break
        else:  # pragma: no cover - the range check above makes the loop find a pair
            return None
        if lo is None or hi is None:
            return None
        if lo.ratio.low is None or lo.ratio.high is None:
            return None
        if hi.ratio.low is None or hi.ratio.high is None:
            return None
        w = 0.0 if hi_a == lo_a else (accept_length - lo_a) / (hi_a - lo_a)

        def mix(x: float, y: float) -> float:
            return x + w * (y - x)

        return Ratio(
            mix(lo.ratio.point, hi.ratio.point),
            mix(lo.ratio.low, hi.ratio.low),
            mix(lo.ratio.high, hi.ratio.high),
            lo.ratio.method,
            lo.ratio.confidence,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        out["contour"] = [asdict(p) for p in self.contour()]
        return out


def _crossing(cells: Sequence[Cell], value: Callable[[Ratio], float | None]) -> float | None:
    """The accept length where ``value(ratio)`` first reaches 1 going up in acceptance,
    interpolated linearly between the two tested cells around it."""
    for a, b in pairwise(cells):
        va, vb = value(a.ratio), value(b.ratio)
        if va is None or vb is None:
            continue
        if va < 1.0 <= vb:
            return a.accept_length + (1.0 - va) / (vb - va) * (b.accept_length - a.accept_length)
    return None


def breakeven_map(
    columns: Sequence[tuple[float, Decision]],
) -> BreakevenMap:
    """The map from one decision per forced acceptance (each the forced arm against the same
    baseline); levels are those every column decided."""
    if len(columns) < 2:
        raise ValueError("a break-even map needs at least 2 forced acceptances")
    ordered = sorted(columns, key=lambda col: col[0])
    acceptances = tuple(a for a, _ in ordered)
    if len(set(acceptances)) != len(acceptances):
        raise ValueError(f"forced acceptances repeat: {acceptances}")
    references = {d.reference.name for _, d in ordered}
    if len(references) != 1:
        raise ValueError(f"the columns have different baselines: {sorted(references)}")
    levels = sorted(set.intersection(*({lv.concurrency for lv in d.levels} for _, d in ordered)))
    if not levels:
        raise ValueError("no level was decided at every forced acceptance")
    cells = []
    for a, decision in ordered:
        for c in levels:
            level = decision.level(c)
            assert level is not None
            cells.append(Cell(a, c, level.ratio, level.status))
    first = ordered[0][1]
    return BreakevenMap(
        reference=first.reference.name,
        acceptances=acceptances,
        levels=tuple(levels),
        cells=tuple(cells),
        margin=first.margin,
        confidence=first.confidence,
    )


def map_from_stored(
    reference: str,
    columns: Sequence[tuple[float, Mapping[str, Any]]],
) -> BreakevenMap:
    """The map from stored decisions (``Decision.to_dict``), as a comparison keeps them."""
    if len(columns) < 2:
        raise ValueError("a break-even map needs at least 2 forced acceptances")
    ordered = sorted(columns, key=lambda col: col[0])
    per = [{int(lv["concurrency"]): lv for lv in d.get("levels") or []} for _, d in ordered]
    levels = sorted(set.intersection(*(set(p) for p in per)))
    if not levels:
        raise ValueError("no level was decided at every forced acceptance")
    cells = []
    for (a, _), by_c in zip(ordered, per, strict=True):
        for c in levels:
            stored = by_c[c]
            r = stored["ratio"]
            ratio = Ratio(
                float(r["point"]),
                None if r.get("low") is None else float(r["low"]),
                None if r.get("high") is None else float(r["high"]),
                r.get("method") or "none",
                float(r.get("confidence") or DEFAULT_CONFIDENCE),
                r.get("refused") or "",
            )
            cells.append(Cell(a, c, ratio, stored["status"]))
    first = ordered[0][1]
    return BreakevenMap(
        reference=reference,
        acceptances=tuple(a for a, _ in ordered),
        levels=tuple(levels),
        cells=tuple(cells),
        margin=float(first.get("margin", DEFAULT_MARGIN)),
        confidence=float(first.get("confidence", DEFAULT_CONFIDENCE)),
    )


@dataclass(frozen=True)
class CategoryPlacement:
    category: str
    acceptance: dict[int, float]  # the category's measured accept length per level
    decision: Decision  # the predicted B/A per level, decided on the carried intervals
    off_map: tuple[int, ...]  # levels whose acceptance lies outside the tested range

    @property
    def crossover_level(self) -> int | None:
        """The smallest level from which the prediction is behind at every level up to the top
        (the decision's ``behind_from``)."""
        return self.decision.behind_from

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "acceptance": {str(c): a for c, a in self.acceptance.items()},
            "decision": self.decision.to_dict(),
            "off_map": list(self.off_map),
            "crossover_level": self.crossover_level,
        }


def place(
    bmap: BreakevenMap,
    acceptance: Mapping[str, Mapping[int, float]],
    *,
    candidate: str = "speculative",
) -> tuple[CategoryPlacement, ...]:
    """Each category's predicted B/A per level from its measured accept length at that level
    (``acceptance``: category -> C -> accept length), decided like a measured comparison."""
    out = []
    for name in sorted(acceptance):
        per_level = {int(c): float(a) for c, a in acceptance[name].items()}
        evidence, off = [], []
        for c in bmap.levels:
            a = per_level.get(c)
            ratio = bmap.predict(a, c) if a is not None else None
            if ratio is None:
                off.append(c)
                continue
            evidence.append(LevelEvidence(c, ratio))
        decision = decide(
            reference=Arm(bmap.reference, "A"),
            candidate=Arm(f"{candidate} [{name}]", "B", speculative=True),
            levels=evidence,
            margin=bmap.margin,
            confidence=bmap.confidence,
        )
        out.append(CategoryPlacement(name, per_level, decision, tuple(off)))
    return tuple(out)


@dataclass(frozen=True)
class LevelCheck:
    concurrency: int
    predicted: Ratio
    predicted_status: Status
    measured: Ratio
    measured_status: Status
    within: bool  # the predicted point lies inside the measured interval


@dataclass(frozen=True)
class PredictionCheck:
    category: str
    levels: tuple[LevelCheck, ...]
    predicted_crossover: int | None
    measured_crossover: int | None

    @property
    def share_within(self) -> float:
        return sum(lv.within for lv in self.levels) / len(self.levels) if self.levels else 0.0

    @property
    def crossover_found(self) -> bool:
        return self.measured_crossover is not None and (
            self.predicted_crossover == self.measured_crossover
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        out["share_within"] = self.share_within
        out["crossover_found"] = self.crossover_found
        return out


def check_levels(
    category: str,
    predicted: Mapping[int, tuple[Ratio, Status]],
    predicted_crossover: int | None,
    measured: Mapping[int, tuple[Ratio, Status]],
    measured_crossover: int | None,
) -> PredictionCheck:
    """Per level tested by both, whether the predicted point lies inside the measured
    interval; the two crossovers as their decisions give them (``behind_from``)."""
    rows = []
    for c in sorted(set(predicted) & set(measured)):
        p_ratio, p_status = predicted[c]
        m_ratio, m_status = measured[c]
        low, high = m_ratio.low, m_ratio.high
        within = low is not None and high is not None and low <= p_ratio.point <= high
        rows.append(LevelCheck(c, p_ratio, p_status, m_ratio, m_status, within))
    return PredictionCheck(category, tuple(rows), predicted_crossover, measured_crossover)


def check_prediction(placement: CategoryPlacement, measured: Decision) -> PredictionCheck:
    """The placed prediction against a measured A/B of the same category (``check_levels``)."""
    return check_levels(
        placement.category,
        {lv.concurrency: (lv.ratio, lv.status) for lv in placement.decision.levels},
        placement.crossover_level,
        {lv.concurrency: (lv.ratio, lv.status) for lv in measured.levels},
        measured.behind_from,
    )
