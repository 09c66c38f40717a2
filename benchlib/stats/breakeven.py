"""The break-even map of one server configuration: B/A (speculative arm at a forced acceptance
against the same server without speculation) over forced accept length x concurrency, each
cell with the decision object's status; the break-even contour and its band; a workload's
measured per-category acceptance placed on it; and a placed prediction checked against a
measured A/B.

The map's cells are the levels of ordinary decisions (``decision_rule.decide_curves`` on one
forced-acceptance arm against the baseline, default protocol), so every status shown here is
the decision's own. Between two tested acceptances the ratio, its interval's low and its high
are each interpolated linearly in accept length: at a fixed batch the verify step's cost does
not depend on how many drafts are accepted, so throughput (tokens per step / step time) is
linear in the accept length and so is B/A. The axis is the accept length each forced arm
measured at that level where it was reported (a forced length is not exactly what a server
delivers: the last step of a request is cut short, so 2.5 forced reads about 2.48 at 128
tokens), else the forced value: a workload's measured acceptance is placed on the same kind of
figure it was measured as. Nothing is extrapolated: an acceptance outside the
tested range gets no prediction. A placed prediction is then decided by ``decision_rule.decide`` on
the carried intervals, so its statuses, crossovers and "behind from" follow the same rules as
a measured comparison's (docs/measurement.md, "The break-even map").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any, TypedDict

from benchlib.json_types import JsonObject
from benchlib.stats.decision import DEFAULT_MARGIN, Arm, Decision, LevelEvidence, Status
from benchlib.stats.decision_rule import decide
from benchlib.stats.intervals import DEFAULT_CONFIDENCE
from benchlib.stats.types import Ratio, RatioJson


@dataclass(frozen=True)
class Cell:
    accept_length: float  # the forced accept length (tokens per verify step)
    concurrency: int
    ratio: Ratio  # B/A of output throughput, forced arm over the baseline
    status: Status
    # The accept length the forced arm measured at this level (server counters, else the
    # engine's per-request figures), None when not reported: the axis a workload's measured
    # acceptance is placed on, so both are read the same way.
    measured: float | None = None

    @property
    def axis(self) -> float:
        return self.measured if self.measured is not None else self.accept_length


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


class CellJson(TypedDict):
    """A ``Cell`` as JSON (``dataclasses.asdict``)."""

    accept_length: float
    concurrency: int
    ratio: RatioJson
    status: Status
    measured: float | None


class BreakevenMapJson(TypedDict):
    """``BreakevenMap.to_dict``: the map's fields as JSON, and its contour."""

    reference: str
    acceptances: list[float]
    levels: list[int]
    cells: list[CellJson]
    margin: float
    confidence: float
    # Each ContourPoint by dataclasses.asdict (concurrency, at, low, high).
    contour: list[JsonObject]


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
            cells = self._column(c)
            out.append(
                ContourPoint(
                    c,
                    _crossing(cells, lambda r: r.point),
                    _crossing(cells, lambda r: r.high),
                    _crossing(cells, lambda r: r.low),
                )
            )
        return tuple(out)

    def _column(self, concurrency: int) -> list[Cell]:
        """The level's cells in increasing accept length on the placing axis (measured, else
        forced): the axis the contour and the interpolation run along."""
        cells = [c for c in self.cells if c.concurrency == concurrency]
        return sorted(cells, key=lambda c: c.axis)

    def predict(self, accept_length: float, concurrency: int) -> Ratio | None:
        """B/A at a measured ``accept_length`` and ``concurrency``, each of point, low and
        high interpolated linearly between the two tested cells around it on the placing axis
        (module notes); None outside the tested range or where a bracketing cell has no
        interval."""
        column = self._column(concurrency)
        if len(column) < 2 or not column[0].axis <= accept_length <= column[-1].axis:
            return None
        lo, hi = next((a, b) for a, b in pairwise(column) if a.axis <= accept_length <= b.axis)
        lo_a, hi_a = lo.axis, hi.axis
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

    def to_dict(self) -> BreakevenMapJson:
        out: BreakevenMapJson = json.loads(json.dumps(asdict(self)))
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
            return a.axis + (1.0 - va) / (vb - va) * (b.axis - a.axis)
    return None


def breakeven_map(
    columns: Sequence[tuple[float, Decision]],
    measured: Mapping[tuple[float, int], float] | None = None,
) -> BreakevenMap:
    """The map from one decision per forced acceptance (each the forced arm against the same
    baseline); levels are those every column decided. ``measured``: (forced, C) -> the accept
    length the forced arm measured there."""
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
            cells.append(Cell(a, c, level.ratio, level.status, (measured or {}).get((a, c))))
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
    measured: Mapping[tuple[float, int], float] | None = None,
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
            cells.append(Cell(a, c, ratio, stored["status"], (measured or {}).get((a, c))))
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


class LevelCheckJson(TypedDict):
    """A ``LevelCheck`` as JSON (``dataclasses.asdict``)."""

    concurrency: int
    predicted: RatioJson
    predicted_status: Status
    measured: RatioJson
    measured_status: Status
    within: bool


class PredictionCheckJson(TypedDict):
    """``PredictionCheck.to_dict``: its fields as JSON, and the figures derived from them."""

    category: str
    levels: list[LevelCheckJson]
    predicted_crossover: int | None
    measured_crossover: int | None
    share_within: float
    crossover_found: bool
    measured_bracket: tuple[int, int] | None  # a list once stored as JSON
    crossover_in_bracket: bool


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
        """The predicted "behind from" level is the measured one."""
        return self.measured_crossover is not None and (
            self.predicted_crossover == self.measured_crossover
        )

    @property
    def measured_bracket(self) -> tuple[int, int] | None:
        """Where the measured A/B puts the crossover: after its last level *ahead* below its
        "behind from" (0 when none) and at or before "behind from"; levels between them that
        are inconclusive leave the crossover anywhere in there."""
        if self.measured_crossover is None:
            return None
        ahead = [
            lv.concurrency
            for lv in self.levels
            if lv.measured_status == "ahead" and lv.concurrency < self.measured_crossover
        ]
        return (max(ahead) if ahead else 0, self.measured_crossover)

    @property
    def crossover_in_bracket(self) -> bool:
        """The predicted "behind from" lies in the measured bracket (after its last level
        ahead, at or before its "behind from")."""
        bracket = self.measured_bracket
        return (
            bracket is not None
            and self.predicted_crossover is not None
            and bracket[0] < self.predicted_crossover <= bracket[1]
        )

    def to_dict(self) -> PredictionCheckJson:
        out: PredictionCheckJson = json.loads(json.dumps(asdict(self)))
        out["share_within"] = self.share_within
        out["crossover_found"] = self.crossover_found
        out["measured_bracket"] = self.measured_bracket
        out["crossover_in_bracket"] = self.crossover_in_bracket
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
