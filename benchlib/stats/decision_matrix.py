"""The decision for a matrix of variants of one server (speculation off, draft lengths 1, 3,
...): each variant against the simplest, and the schedule, from the same statuses.

Per level, the choice is the simplest variant that no other variant is *ahead* of, with
``decision``'s statuses (interval wholly above 1 and not inside 1 +/- margin): the rule of
``schedule.derive_schedule`` with the margin, so a variant chosen at a level is exactly one
whose own A/B decision against the simplest says "ahead" there, and the schedule and the
pairwise recommendations cannot disagree. The level's action is *on* (a draft length above 0
chosen), *off* (the simplest chosen and every other variant behind or equivalent to it), or
*no recommendation yet* (the simplest chosen because nothing was shown either way; the
schedule keeps it off there until shown). Untested concurrencies between two bands go to the
simpler band (``decision_rule.group_bands``). The bands become the engine's configuration through
``schedule_configs.engine_schedules``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from benchlib.stats.batch_thresholds import (
    DEFAULT_MIN_SHARE,
    BatchPlan,
    LevelBatches,
    plan_batches,
)
from benchlib.stats.decision import (
    DEFAULT_MARGIN,
    Action,
    Arm,
    ArmHealth,
    Band,
    Decision,
    conditions,
)
from benchlib.stats.decision_rule import decide_curves, group_bands
from benchlib.stats.decision_wording import span
from benchlib.stats.intervals import DEFAULT_CONFIDENCE
from benchlib.stats.schedule import Step
from benchlib.stats.schedule_configs import EngineSchedule, engine_schedules
from benchlib.stats.switch_costs import (
    CostVariant,
    StepEvidence,
    SwitchCost,
    predict_switch_costs,
    trade_off_text,
)
from benchlib.stats.types import Curve


@dataclass(frozen=True)
class MatrixVariant:
    arm: Arm
    curve: Curve
    draft_length: int  # 0 = speculation off
    # Per C what the level says about this variant's engine step (``switch_costs``): the
    # evidence a switch point's cost to its neighbouring level is predicted from.
    steps: Mapping[int, StepEvidence] = field(default_factory=dict)


@dataclass(frozen=True)
class MatrixDecision:
    reference: str  # the simplest variant
    margin: float
    confidence: float
    pairwise: tuple[Decision, ...]  # every other variant against the simplest
    bands: tuple[Band, ...]
    steps: tuple[Step, ...]
    configs: tuple[EngineSchedule, ...]
    untested: tuple[int, ...]
    recommendation: str
    # How the switches were placed: from the running batch sizes each level's server reported
    # (``batch_thresholds``), or on C where there were no readings; the ranges behind it.
    thresholds: str = ""
    batch_ranges: tuple[LevelBatches, ...] = ()
    # What each switch costs the level just above it (its turnarounds run the other variant's
    # step), predicted from the matrix before any verification (``switch_costs``).
    switch_costs: tuple[SwitchCost, ...] = ()

    def statements(self) -> tuple[str, ...]:
        out = (
            *(band.sentence for band in self.bands),
            self.recommendation,
            *(cost.sentence for cost in self.switch_costs),
        )
        return (*out, self.thresholds) if self.thresholds else out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        out["pairwise"] = [d.to_dict() for d in self.pairwise]
        out["statements"] = list(self.statements())
        return out


def decide_matrix(
    variants: Sequence[MatrixVariant],
    *,
    figure: str = "output_tok_s",
    rate_mode: bool = False,
    margin: float = DEFAULT_MARGIN,
    confidence: float = DEFAULT_CONFIDENCE,
    health: Mapping[str, Mapping[int, ArmHealth]] | None = None,
    engine: str = "",
    vllm_base: Mapping[str, Any] | None = None,
    max_num_seqs: int | None = None,
    observed: Mapping[int, Mapping[int, int]] | None = None,
    min_share: float = DEFAULT_MIN_SHARE,
) -> MatrixDecision:
    """The matrix's decision (module notes); ``variants`` in any order (sorted simplest
    first by draft length), ``health`` by variant name then C, ``observed`` the running-batch
    gauge readings per level (C -> batch size -> readings, pooled over the variants) from
    which the switches are placed (``batch_thresholds``)."""
    if len(variants) < 2:
        raise ValueError("a matrix needs at least 2 variants")
    ordered = sorted(variants, key=lambda v: v.draft_length)
    names = [v.arm.name for v in ordered]
    if len(set(names)) != len(names):
        raise ValueError(f"variant names must be unique: {names}")
    tested = [set(v.curve.concurrencies) for v in ordered]
    common = sorted(set.intersection(*tested))
    if not common:
        raise ValueError("no concurrency level was tested by every variant")
    untested = tuple(sorted(set.union(*tested) - set(common)))
    health = health or {}

    def pair(i: int, j: int) -> Decision:
        a, b = ordered[i], ordered[j]
        both = {
            c: (
                health.get(a.arm.name, {}).get(c, ArmHealth()),
                health.get(b.arm.name, {}).get(c, ArmHealth()),
            )
            for c in common
        }
        return decide_curves(
            a.curve,
            b.curve,
            figure=figure,
            rate_mode=rate_mode,
            margin=margin,
            confidence=confidence,
            health=both,
            arms=(a.arm, b.arm),
        )

    pairs = {(i, j): pair(i, j) for i in range(len(ordered)) for j in range(i + 1, len(ordered))}

    def beats(winner: int, loser: int, c: int) -> bool:
        if winner > loser:
            level = pairs[(loser, winner)].level(c)
            return level is not None and level.status == "ahead"
        level = pairs[(winner, loser)].level(c)
        return level is not None and level.status == "behind"

    cond = conditions(margin, confidence)

    def unbeaten(i: int, c: int) -> bool:
        return not any(beats(j, i, c) for j in range(len(ordered)) if j != i)

    def relative(i: int, own: int, c: int) -> float:
        """Variant ``i`` over ``own`` at C by the points, oriented (above 1: better)."""
        if i == own:
            return 1.0
        pair = pairs[(min(i, own), max(i, own))].level(c)
        assert pair is not None
        return pair.ratio.point if i > own else 1.0 / pair.ratio.point

    # Per level what the schedule may run (``batch_thresholds``): the level's own choice (the
    # simplest variant no other is ahead of), or a variant no other is ahead of whose point is
    # within the margin of the own choice's. The plan holds one of them across levels that
    # run the same batch sizes and places the switches between their ranges.
    own = {c: next(i for i in range(len(ordered)) if unbeaten(i, c)) for c in common}
    admissible = {
        c: [
            i
            for i in range(len(ordered))
            if i == own[c] or (unbeaten(i, c) and relative(i, own[c], c) >= 1.0 - margin)
        ]
        for c in common
    }
    plan = plan_batches(common, admissible, observed, min_share=min_share)
    choices: list[tuple[int, Action, int | None, str]] = []
    for c in common:
        chosen = plan.choices[c]
        action: Action = "on" if ordered[chosen].draft_length > 0 else "off"
        if chosen == 0:
            against = [pairs[(0, j)].level(c) for j in range(1, len(ordered))]
            if any(lv is None or lv.status not in ("behind", "equivalent") for lv in against):
                action = "none"
        choices.append((c, action, ordered[chosen].draft_length, ordered[chosen].arm.name))
    bands = []
    for start, end, levels, action, k, variant in _place(group_bands(choices), plan):
        arm = next(v.arm for v in ordered if v.arm.name == variant)
        what = {
            "on": f"{arm.title}, K={k}",
            "off": f"{arm.title} (speculation off)",
            "none": f"no recommendation yet; {arm.title} until a variant is shown ahead",
        }[action]
        tested_levels = ", ".join(f"C={lv}" for lv in levels)
        held = "".join(
            f"; C={lv} runs batch sizes {_range(plan.range_of(lv))}, overlapping "
            + ", ".join(f"C={o}" for o in plan.held[lv])
            + ": one variant for them, the simplest behind at none"
            for lv in levels
            if lv in plan.held
        )
        sentence = f"{span(start, end)}: {what} (tested at {tested_levels}{held}; {cond})."
        bands.append(Band(start, end, levels, action, k, variant, sentence))
    steps: list[Step] = []
    for band in bands:
        k = band.draft_length or 0
        if steps and steps[-1].draft_length == k:
            steps[-1] = Step(steps[-1].start, band.end, k)
        else:
            steps.append(Step(band.start, band.end, k))
    configs = engine_schedules(steps, engine, vllm_base=vllm_base, max_num_seqs=max_num_seqs)
    costs = predict_switch_costs(
        [
            CostVariant(
                v.arm.name,
                v.draft_length,
                {lv.concurrency: lv.value for lv in v.curve.levels},
                v.steps,
            )
            for v in ordered
        ],
        steps,
        common,
        margin=margin,
    )
    return MatrixDecision(
        reference=names[0],
        margin=margin,
        confidence=confidence,
        pairwise=tuple(pairs[(0, j)] for j in range(1, len(ordered))),
        bands=tuple(bands),
        steps=tuple(steps),
        configs=configs,
        untested=untested,
        recommendation=_recommendation(bands, steps, cond) + trade_off_text(costs, margin),
        thresholds=_thresholds(plan, min_share),
        batch_ranges=plan.ranges,
        switch_costs=costs,
    )


def _place(
    groups: Sequence[tuple[int, int | None, tuple[int, ...], Action, int | None, str]],
    plan: BatchPlan,
) -> list[tuple[int, int | None, tuple[int, ...], Action, int | None, str]]:
    """``group_bands``' bands with each change of draft length moved to the plan's switch
    (the running batch sizes, not C); a change of action alone keeps its place, within the
    switches around it."""
    switches = iter(plan.switches)
    out: list[tuple[int, int | None, tuple[int, ...], Action, int | None, str]] = []
    start = 1
    for i, (_, end, levels, action, k, variant) in enumerate(groups):
        if end is None or i + 1 == len(groups):
            out.append((start, None, levels, action, k, variant))
            break
        if groups[i + 1][4] != k:
            at = next(switches).at
        else:
            later = [s.at for s in plan.switches if s.at > start]
            ceiling = later[0] - 1 if later else end + 1
            at = min(max(end + 1, start + 1), max(ceiling, start + 1))
        out.append((start, at - 1, levels, action, k, variant))
        start = at
    return out


def _range(batches: LevelBatches) -> str:
    if batches.low == batches.high:
        return str(batches.low)
    return f"{batches.low}-{batches.high}"


def _thresholds(plan: BatchPlan, min_share: float) -> str:
    """The one sentence on where the switches come from."""
    if not plan.observed:
        return (
            "Switches placed on C: no running-batch readings of the server were recorded "
            "during these levels, so each level is taken to run batch size C."
        )
    ranges = "; ".join(
        f"C={r.concurrency}: {_range(r)}" + ("" if r.readings else " (no readings)")
        for r in plan.ranges
    )
    text = (
        "Switches placed on the running batch sizes the server reported at each level "
        f"(each batch size read for at least {min_share:.0%} of the level's readings: "
        f"{ranges})"
    )
    straddling = [
        f"C={c} runs batch sizes {_range(plan.range_of(c))} across the switch at {s.at}"
        for s in plan.switches
        for c in s.straddling
    ]
    if straddling:
        text += (
            "; no per-batch switch runs every level on its own choice: "
            + ", ".join(straddling)
            + " (a mix of two variants there, which the verification measures)"
        )
    return text + "."


def _recommendation(bands: Sequence[Band], steps: Sequence[Step], cond: str) -> str:
    actions = {band.action for band in bands}
    if actions == {"none"}:
        return f"No recommendation yet: no variant is shown ahead or behind at any level ({cond})."
    if actions == {"off"}:
        return f"Schedule: serve without speculation at every tested level ({cond})."
    parts = "; ".join(
        f"{span(s.start, s.end)} K={s.draft_length}"
        if s.draft_length
        else f"{span(s.start, s.end)} off"
        for s in steps
    )
    pending = [span(b.start, b.end) for b in bands if b.action == "none"]
    text = f"Schedule: {parts} ({cond})"
    if pending:
        text += f"; no recommendation yet at {', '.join(pending)} (off there until shown)"
    return text + "."
