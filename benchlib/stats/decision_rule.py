"""The rule that turns each level's evidence into a decision (``decision.Decision``): the
statuses, the crossovers, the recommended bands; ``decide`` and ``decide_curves`` are its entry
points, and ``decision_wording`` writes the sentences.

Statuses of a level (candidate against reference, on the deciding figure, oriented so that
above 1 means the candidate is better; latencies are inverted: reference / candidate):

* ``not_comparable``: the level did not measure what both arms were asked to run (the two arms
  ran different workloads, the client was the bottleneck, a closed-loop level's achieved
  concurrency stayed below ``ACHIEVED_SHARE`` of the asked C, more than ``FAILED_SHARE`` of its
  requests failed, or the load source was starved); the reason names the arm.
* ``inconclusive``: no interval (one figure per arm), an interval refused by
  ``intervals.publishable``, drift of an arm's own runs above the margin, or an interval that
  contains 1 without lying inside 1 +/- margin.
* ``equivalent``: the interval lies inside 1 +/- margin (on the log scale, [1/(1+m), 1+m],
  so that B/A and A/B agree): any difference is smaller than the margin. It takes precedence
  over ahead/behind: a difference shown to be smaller than the margin is not worth acting on.
* ``ahead`` / ``behind``: the interval lies wholly above / below 1 (and not inside the margin).

A point alone never decides anything. Crossovers are reported only between two adjacent
tested levels that are ``ahead`` and ``behind``; a level of any other status between them
means the data do not say where the ratio turns.

The recommendation (when exactly one arm speculates) is per level: speculation *on* where the
speculative arm is ahead, *off* where it is behind or equivalent (no gain beyond the margin:
the simpler server), and *no recommendation yet* where the level is inconclusive or not
comparable. Consecutive levels with the same action form a band; the first band starts at
C=1 and the last has no upper end; untested concurrencies between two bands go to "off" if
either band is off, else to "no recommendation yet" (switch speculation on only where shown).
The engine's own options are written when the bands are "on up to N, off above"
(``engines.speculation_switches``). Matrices of variants of one server decide a schedule
with the same statuses (``decision_matrix``).

Rate mode: an open-loop level at a fixed request rate below saturation delivers the offered
rate whatever the server, so throughput is never the deciding figure there (``decide``
refuses it); latency (TTFT/TPOT/E2E, lower is better) or goodput decides, and the sentences
name the figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Literal

from benchlib.stats.crossover import interpolate_crossing
from benchlib.stats.decision import (
    DEFAULT_MARGIN,
    FIGURES,
    Action,
    Arm,
    ArmHealth,
    Band,
    Crossover,
    Decision,
    Figure,
    LevelDecision,
    LevelEvidence,
    Status,
    conditions,
)
from benchlib.stats.decision_wording import (
    ACTION_WORDS,
    STATUS_WORDS,
    level_sentence,
    recommendation_sentence,
    span,
    summary_sentence,
    why_sentence,
)
from benchlib.stats.intervals import (
    DEFAULT_CONFIDENCE,
    is_within_run,
    ratio_curve,
)
from benchlib.stats.schedule import inverse
from benchlib.stats.types import Curve, Ratio, inside_margin

# A closed-loop level whose achieved concurrency (Little's law) stays below this share of the
# asked C measured a lighter load than its label (e.g. C=64 with 8 requests: 7.75).
ACHIEVED_SHARE = 0.8
# Failed requests deliver no tokens and are left out of the figures; above this share of a
# level's requests the figures describe a different load than the other arm's.
FAILED_SHARE = 0.01


def _health_reason(
    c: int, arm: Arm, health: ArmHealth, rate_mode: bool, failed_share: float
) -> str:
    if health.client_limited:
        said = f": {health.client_warning}" if health.client_warning else ""
        return f"{arm.title}'s load generator was the bottleneck (client-limited{said})"
    if health.load_source_starved:
        why = f": {health.starved_reason}" if health.starved_reason else ""
        return f"{arm.title}'s load source fell behind (starved{why})"
    achieved = health.achieved_concurrency
    if not rate_mode and achieved is not None and achieved < ACHIEVED_SHARE * c:
        return (
            f"{arm.title} reached C={achieved:.3g}, below {ACHIEVED_SHARE:.0%} of the asked C={c}"
        )
    if health.requests > 0 and health.failed / health.requests > failed_share:
        share = health.failed / health.requests
        return (
            f"{share:.1%} of {arm.title}'s requests failed ({health.failed} of "
            f"{health.requests}; the limit is {failed_share:.0%})"
        )
    return ""


def _workload_reason(ref_w: str, cand_w: str, reference: Arm, candidate: Arm) -> str:
    """Different workloads, naming the settings that differ where the fingerprints are
    "key=value; ..." items (as ``benchmarks.experiments.decisions`` writes them)."""
    ref_items, cand_items = set(ref_w.split("; ")), set(cand_w.split("; "))
    keys = sorted({item.split("=", 1)[0] for item in ref_items ^ cand_items if "=" in item})
    if not keys or "|" in ref_w or "|" in cand_w:
        return "the two arms ran different workloads"
    shown = ", ".join(keys)
    return (
        f"the two arms ran different workloads ({shown} differ between {reference.title} and "
        f"{candidate.title})"
    )


def _status(
    ev: LevelEvidence,
    ratio: Ratio,
    reference: Arm,
    candidate: Arm,
    *,
    margin: float,
    rate_mode: bool,
    failed_share: float,
) -> tuple[Status, str]:
    ref_w, cand_w = ev.reference.workload, ev.candidate.workload
    if ref_w and cand_w and ref_w != cand_w:
        return "not_comparable", _workload_reason(ref_w, cand_w, reference, candidate)
    for arm, health in ((reference, ev.reference), (candidate, ev.candidate)):
        reason = _health_reason(ev.concurrency, arm, health, rate_mode, failed_share)
        if reason:
            return "not_comparable", reason
    if ev.drift is not None and ev.drift > margin:
        return "inconclusive", (
            f"drift of {ev.drift:.1%} between an arm's first and last runs (over the "
            "experiment's levels) exceeds the margin"
        )
    if ratio.refused:
        return "inconclusive", f"interval refused: {ratio.refused}"
    if ratio.low is None or ratio.high is None:
        return "inconclusive", "no interval (one figure per arm)"
    if inside_margin(ratio.low, ratio.high, margin):
        return "equivalent", f"the interval lies inside 1 ± {margin:.0%}"
    if ratio.low > 1.0:
        return "ahead", "the interval lies above 1"
    if ratio.high < 1.0:
        return "behind", "the interval lies below 1"
    return "inconclusive", f"the interval contains 1 and is not inside 1 ± {margin:.0%}"


def _crossovers(levels: Sequence[LevelDecision], candidate: Arm, figure: Figure) -> list[Crossover]:
    out = []
    for lo, hi in pairwise(levels):
        pair = (lo.status, hi.status)
        if pair not in (("ahead", "behind"), ("behind", "ahead")):
            continue
        direction: Literal["falls-behind", "pulls-ahead"] = (
            "falls-behind" if lo.status == "ahead" else "pulls-ahead"
        )
        at = interpolate_crossing(lo.concurrency, lo.ratio.point, hi.concurrency, hi.ratio.point)
        verb = "falls behind" if direction == "falls-behind" else "pulls ahead"
        sentence = (
            f"Crossover: {candidate.title} {verb} on {figure.label} between C={lo.concurrency} "
            f"({lo.status}) and C={hi.concurrency} ({hi.status}), near C≈{at:.3g} "
            "(log-log interpolation of the points)."
        )
        out.append(Crossover(lo.concurrency, hi.concurrency, direction, at, sentence))
    return out


def _action(status: Status, speculative_is_candidate: bool) -> Action:
    if status in ("inconclusive", "not_comparable"):
        return "none"
    if status == "equivalent":
        return "off"
    spec_ahead = (status == "ahead") == speculative_is_candidate
    return "on" if spec_ahead else "off"


_GAP_PRIORITY: dict[Action, int] = {"off": 0, "none": 1, "on": 2}


def group_bands(
    actions: Sequence[tuple[int, Action, int | None, str]],
) -> list[tuple[int, int | None, tuple[int, ...], Action, int | None, str]]:
    """(start, end, levels, action, draft length, variant) per run of equal choices; the
    untested concurrencies between two runs go to the simpler one (off, then none, then on;
    between two "on" runs the shorter draft)."""
    groups: list[tuple[list[int], Action, int | None, str]] = []
    for c, action, k, variant in actions:
        if groups and groups[-1][1] == action and groups[-1][2] == k:
            groups[-1][0].append(c)
        else:
            groups.append(([c], action, k, variant))
    out: list[tuple[int, int | None, tuple[int, ...], Action, int | None, str]] = []
    start = 1
    for i, (levels, action, k, variant) in enumerate(groups):
        end: int | None = None
        if i + 1 < len(groups):
            nxt_levels, nxt_action, nxt_k, _ = groups[i + 1]
            this_rank = (_GAP_PRIORITY[action], k or 0)
            next_rank = (_GAP_PRIORITY[nxt_action], nxt_k or 0)
            end = nxt_levels[0] - 1 if this_rank < next_rank else levels[-1]
        out.append((start, end, tuple(levels), action, k, variant))
        if end is not None:
            start = end + 1
    return out


def _bands(
    levels: Sequence[LevelDecision], spec: Arm, speculative_is_candidate: bool, cond: str
) -> list[Band]:
    actions = [
        (lv.concurrency, _action(lv.status, speculative_is_candidate), None, spec.name)
        for lv in levels
    ]
    out = []
    for start, end, tested, action, _, _ in group_bands(actions):
        statuses = ", ".join(
            f"C={lv.concurrency} {STATUS_WORDS[lv.status]}"
            for lv in levels
            if lv.concurrency in tested
        )
        sentence = (
            f"{span(start, end)}: {ACTION_WORDS[action]} for {spec.title} ({statuses}; {cond})."
        )
        out.append(Band(start, end, tested, action, None, spec.name, sentence))
    return out


def decide(
    *,
    reference: Arm,
    candidate: Arm,
    levels: Sequence[LevelEvidence],
    figure: str = "output_tok_s",
    rate_mode: bool = False,
    margin: float = DEFAULT_MARGIN,
    confidence: float = DEFAULT_CONFIDENCE,
    failed_share: float = FAILED_SHARE,
) -> Decision:
    """The decision for ``candidate`` against ``reference`` from each level's evidence (module
    notes). ``figure`` is a key of ``FIGURES``; in ``rate_mode`` a throughput figure is refused."""
    if figure not in FIGURES:
        raise ValueError(f"unknown figure {figure!r}; one of {', '.join(FIGURES)}")
    fig = FIGURES[figure]
    if rate_mode and fig.throughput:
        raise ValueError(
            f"{fig.label} cannot decide at a fixed request rate: below saturation it equals "
            "the offered rate; decide on a latency figure or goodput"
        )
    if not 0.0 <= margin < 1.0:
        raise ValueError("margin must be in [0, 1)")
    cond = conditions(margin, confidence)
    decided: list[LevelDecision] = []
    for ev in sorted(levels, key=lambda e: e.concurrency):
        ratio = ev.ratio if fig.higher_is_better else inverse(ev.ratio)
        status, reason = _status(
            ev,
            ratio,
            reference,
            candidate,
            margin=margin,
            rate_mode=rate_mode,
            failed_share=failed_share,
        )
        sentence = level_sentence(
            ev.concurrency, status, reason, ratio, ev.repeats, candidate, fig, margin
        )
        within = is_within_run(ratio.method)
        decided.append(
            LevelDecision(ev.concurrency, ratio, ev.repeats, status, reason, within, sentence)
        )
    crossovers = _crossovers(decided, candidate, fig)
    spec: Arm | None = None
    if reference.speculative != candidate.speculative:
        spec = candidate if candidate.speculative else reference
    bands = _bands(decided, spec, spec is candidate, cond) if spec is not None else []
    recommendation, options = recommendation_sentence(bands, spec, cond)
    summary = summary_sentence(decided, reference, candidate, fig, rate_mode, cond)
    why = why_sentence(levels, decided, reference, candidate, fig)
    return Decision(
        reference=reference,
        candidate=candidate,
        figure=fig,
        rate_mode=rate_mode,
        margin=margin,
        confidence=confidence,
        levels=tuple(decided),
        crossovers=tuple(crossovers),
        bands=tuple(bands),
        engine_options=options,
        summary=summary,
        recommendation=recommendation,
        why=why,
    )


def decide_curves(
    reference: Curve,
    candidate: Curve,
    *,
    figure: str = "output_tok_s",
    rate_mode: bool = False,
    margin: float = DEFAULT_MARGIN,
    confidence: float = DEFAULT_CONFIDENCE,
    health: dict[int, tuple[ArmHealth, ArmHealth]] | None = None,
    drift: dict[int, float] | None = None,
    arms: tuple[Arm, Arm] | None = None,
) -> Decision:
    """``decide`` on two curves of ``figure`` (their levels' repeats, else requests, give the
    intervals as ``intervals.ratio_curve`` does); ``health`` maps C to (reference, candidate);
    ``arms`` names them (by default from the curves: name, speculative, engine)."""
    ratios = ratio_curve(reference, candidate, confidence=confidence)
    evidence = []
    for lr in ratios.levels:
        ref_level, cand_level = reference.level(lr.concurrency), candidate.level(lr.concurrency)
        assert ref_level is not None and cand_level is not None
        repeats = min(max(len(ref_level.repeats), 1), max(len(cand_level.repeats), 1))
        ref_h, cand_h = (health or {}).get(lr.concurrency, (ArmHealth(), ArmHealth()))
        evidence.append(
            LevelEvidence(
                lr.concurrency,
                lr.ratio,
                repeats=repeats,
                reference=ref_h,
                candidate=cand_h,
                drift=(drift or {}).get(lr.concurrency),
            )
        )
    if arms is None:
        arms = (
            Arm(reference.name, "", reference.speculative, reference.engine),
            Arm(candidate.name, "", candidate.speculative, candidate.engine),
        )
    return decide(
        reference=arms[0],
        candidate=arms[1],
        levels=evidence,
        figure=figure,
        rate_mode=rate_mode,
        margin=margin,
        confidence=confidence,
    )
