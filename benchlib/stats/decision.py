"""One decision per comparison: the status of every level, the crossovers, the recommendation
and the sentence for each, computed once from the evidence and rendered by every surface.

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

Defaults: a margin of 2% (the run-to-run spread of the same server on a quiet machine is about
1%; a 2% difference is the smallest that the shipped repeats resolve and that is worth a
configuration change) and the 95% confidence of ``intervals``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any, Literal

from benchlib.stats.crossover import interpolate_crossing
from benchlib.stats.engines import EngineOption, option_names, speculation_switches
from benchlib.stats.intervals import (
    DEFAULT_CONFIDENCE,
    DEFAULT_N_BOOT,
    is_within_run,
    ratio_curve,
)
from benchlib.stats.schedule import inverse
from benchlib.stats.types import Curve, Ratio, inside_margin

Status = Literal["ahead", "behind", "equivalent", "inconclusive", "not_comparable"]
Action = Literal["on", "off", "none"]

DEFAULT_MARGIN = 0.02
# A closed-loop level whose achieved concurrency (Little's law) stays below this share of the
# asked C measured a lighter load than its label (e.g. C=64 with 8 requests: 7.75).
ACHIEVED_SHARE = 0.8
# Failed requests deliver no tokens and are left out of the figures; above this share of a
# level's requests the figures describe a different load than the other arm's.
FAILED_SHARE = 0.01
WITHIN_RUN = "within-run interval: leaves out run-to-run variance"


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    higher_is_better: bool
    throughput: bool = False


FIGURES: dict[str, Figure] = {
    f.key: f
    for f in (
        Figure("output_tok_s", "output throughput", True, throughput=True),
        Figure("total_tok_s", "total throughput", True, throughput=True),
        Figure("steady_output_tok_s", "steady-window throughput", True, throughput=True),
        Figure("goodput_tok_s", "goodput", True),
        Figure("ttft_p50_ms", "TTFT p50", False),
        Figure("ttft_p99_ms", "TTFT p99", False),
        Figure("tpot_p50_ms", "TPOT p50", False),
        Figure("e2e_p50_ms", "E2E p50", False),
        Figure("e2e_p99_ms", "E2E p99", False),
    )
}


@dataclass(frozen=True)
class Arm:
    name: str
    label: str = ""
    speculative: bool = False
    engine: str = ""  # the profile's engine key (engines.ENGINE_NAMES), "" when unknown

    @property
    def title(self) -> str:
        return f"{self.label} ({self.name})" if self.label else self.name


@dataclass(frozen=True)
class ArmHealth:
    """What one arm's runs of one level say about themselves (counts summed over its runs)."""

    requests: int = 0
    failed: int = 0
    cancelled: int = 0  # stopped by the client at the level's end: not failures
    achieved_concurrency: float | None = None  # the lowest over the arm's runs
    client_limited: bool = False
    client_warning: str = ""  # what the load generator said about itself, e.g. a loop stall
    # The load source could not keep up: a simulator that fell behind its own step model, or
    # the load generator's arrivals late against their schedule (``starved_reason`` says).
    load_source_starved: bool = False
    starved_reason: str = ""
    workload: str = ""  # a fingerprint of the prompts and load settings; "" when unknown


@dataclass(frozen=True)
class LevelEvidence:
    """One tested level: B/A of the deciding figure as measured (not yet oriented), the
    runs per arm, both arms' health, and the drift of the arms' own first and last runs
    (the larger relative change of the two; None when not measured)."""

    concurrency: int
    ratio: Ratio
    repeats: int = 1
    reference: ArmHealth = field(default_factory=ArmHealth)
    candidate: ArmHealth = field(default_factory=ArmHealth)
    drift: float | None = None
    # The level's latency medians (ms) of (reference, candidate) where measured: what the
    # decision's "why" line reads (``itl_p50_ms``, ``ttft_p50_ms``).
    latency: tuple[Mapping[str, float | None], Mapping[str, float | None]] | None = None


@dataclass(frozen=True)
class LevelDecision:
    concurrency: int
    ratio: Ratio  # oriented: above 1 means the candidate is better
    repeats: int
    status: Status
    reason: str
    within_run: bool
    sentence: str


@dataclass(frozen=True)
class Crossover:
    lower_level: int
    upper_level: int
    direction: Literal["falls-behind", "pulls-ahead"]
    at: float  # log-log interpolation between the two levels' points
    sentence: str


@dataclass(frozen=True)
class Band:
    start: int
    end: int | None
    levels: tuple[int, ...]
    action: Action
    draft_length: int | None  # matrices: the variant's draft length (0 = off)
    variant: str
    sentence: str


@dataclass(frozen=True)
class Decision:
    reference: Arm
    candidate: Arm
    figure: Figure
    rate_mode: bool
    margin: float
    confidence: float
    levels: tuple[LevelDecision, ...]
    crossovers: tuple[Crossover, ...]
    bands: tuple[Band, ...]
    engine_options: tuple[EngineOption, ...]
    summary: str
    recommendation: str
    # One line on the trade-off behind the statuses: ITL and TTFT at the lowest level, and
    # where the deciding figure turns ("" without latency figures).
    why: str = ""

    @property
    def within_run(self) -> bool:
        return any(level.within_run for level in self.levels)

    def level(self, concurrency: int) -> LevelDecision | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)

    def settled_from(self, status: Status) -> int | None:
        """The smallest tested C from which every level up to the top has ``status``; None
        when the top level has another (a point alone never settles anything)."""
        start = None
        for level in reversed(self.levels):
            if level.status != status:
                break
            start = level.concurrency
        return start

    @property
    def behind_from(self) -> int | None:
        return self.settled_from("behind")

    @property
    def ahead_from(self) -> int | None:
        return self.settled_from("ahead")

    def statements(self) -> tuple[str, ...]:
        """Every sentence, in the order the surfaces print them."""
        return (
            self.summary,
            *((self.why,) if self.why else ()),
            *(level.sentence for level in self.levels),
            *(c.sentence for c in self.crossovers),
            *(band.sentence for band in self.bands),
            self.recommendation,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able copy (stored with the comparison; the surfaces render it)."""
        out: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        out["within_run"] = self.within_run
        out["behind_from"] = self.behind_from
        out["ahead_from"] = self.ahead_from
        out["statements"] = list(self.statements())
        return out


def conditions(margin: float, confidence: float) -> str:
    """The phrase stated beside every conclusion."""
    return f"margin ±{margin:.0%}, {confidence:.0%} confidence"


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


def _ratio_text(ratio: Ratio, figure: Figure) -> str:
    how = "" if figure.higher_is_better else f" ({figure.label} lower is better: A/B)"
    text = f"{figure.label} {ratio.point:.3f}x{how}"
    if ratio.low is not None and ratio.high is not None:
        text += f", {ratio.confidence:.0%} interval {ratio.low:.3f}-{ratio.high:.3f}x"
    return text


_STATUS_WORDS: dict[Status, str] = {
    "ahead": "ahead",
    "behind": "behind",
    "equivalent": "equivalent",
    "inconclusive": "inconclusive",
    "not_comparable": "not comparable",
}


def _level_sentence(
    c: int,
    status: Status,
    reason: str,
    ratio: Ratio,
    repeats: int,
    candidate: Arm,
    figure: Figure,
    margin: float,
) -> str:
    runs = f"{repeats} run{'s' if repeats != 1 else ''} per arm"
    body = f"C={c}: {candidate.title} {_STATUS_WORDS[status]} ({reason}): "
    body += f"{_ratio_text(ratio, figure)}; {runs}; {conditions(margin, ratio.confidence)}"
    if is_within_run(ratio.method):
        body += f"; {WITHIN_RUN}"
    return body + "."


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


def span(start: int, end: int | None) -> str:
    if end is None:
        return f"C={start} and above"
    return f"C={start}" if start == end else f"C={start}-{end}"


_ACTION_WORDS: dict[Action, str] = {
    "on": "speculation on",
    "off": "speculation off",
    "none": "no recommendation yet",
}


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
            f"C={lv.concurrency} {_STATUS_WORDS[lv.status]}"
            for lv in levels
            if lv.concurrency in tested
        )
        sentence = (
            f"{span(start, end)}: {_ACTION_WORDS[action]} for {spec.title} ({statuses}; {cond})."
        )
        out.append(Band(start, end, tested, action, None, spec.name, sentence))
    return out


def _recommendation(
    bands: Sequence[Band], spec: Arm | None, cond: str
) -> tuple[str, tuple[EngineOption, ...]]:
    if spec is None:
        return "No speculation recommendation: both arms speculate or neither does.", ()
    if not bands:
        return "No recommendation yet: no level was tested by both arms.", ()
    actions = [band.action for band in bands]
    names = option_names(spec.engine)
    see = f" ({names})" if names else ""
    if actions == ["on"]:
        return (
            f"Recommendation: keep speculation on ({spec.title}) at every tested level{see}; "
            f"{cond}.",
            (),
        )
    if actions == ["off"]:
        return f"Recommendation: serve without speculation ({spec.title}){see}; {cond}.", ()
    if actions == ["on", "off"] and bands[0].end is not None:
        options = speculation_switches(bands[0].end, spec.engine)
        written = "; ".join(f"{o.engine} {o.value}" for o in options)
        return (
            f"Recommendation: speculation ({spec.title}) on up to C={bands[0].end}, off above "
            f"({written}); {cond}.",
            options,
        )
    if "none" in actions and "on" not in actions and "off" not in actions:
        return f"No recommendation yet: no level is conclusive{see}; {cond}.", ()
    parts = "; ".join(f"{span(b.start, b.end)} {_ACTION_WORDS[b.action]}" for b in bands)
    return f"Recommendation by band ({spec.title}){see}: {parts}; {cond}.", ()


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
        sentence = _level_sentence(
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
    recommendation, options = _recommendation(bands, spec, cond)
    summary = _summary(decided, reference, candidate, fig, rate_mode, cond)
    why = _why(levels, decided, reference, candidate, fig)
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


def _change(cand: float, ref: float, what: str) -> str:
    """How the candidate's latency compares with the reference's, in words."""
    ratio = cand / ref
    if ratio >= 1.5:
        return f"{what} is {ratio:.1f}x higher"
    if round(ratio, 2) > 1.0:
        return f"{what} is {ratio - 1:.0%} higher"
    if round(ratio, 2) < 1.0:
        return f"{what} is {1 - ratio:.0%} lower"
    return f"{what} is equal (within 0.5%)"


def _why(
    evidence: Sequence[LevelEvidence],
    decided: Sequence[LevelDecision],
    reference: Arm,
    candidate: Arm,
    figure: Figure,
) -> str:
    """The trade-off in one line: at the lowest level with both arms' latencies, the
    candidate's ITL and TTFT p50 against the reference's, then where the deciding figure turns
    (the last *ahead* level before the first *behind* one, by the statuses)."""
    found = next(
        (
            ev
            for ev in sorted(evidence, key=lambda e: e.concurrency)
            if ev.latency is not None
            and all(
                isinstance(side.get(key), int | float) and (side.get(key) or 0) > 0
                for side in ev.latency
                for key in ("itl_p50_ms", "ttft_p50_ms")
            )
        ),
        None,
    )
    if found is None or found.latency is None:
        return ""
    ref, cand = found.latency
    parts = [
        _change(float(cand[key] or 0), float(ref[key] or 0), label)
        for key, label in (("itl_p50_ms", "ITL p50"), ("ttft_p50_ms", "TTFT p50"))
    ]
    text = (
        f"Why: at C={found.concurrency} against {reference.title}, {candidate.title}'s "
        f"{parts[0]} and its {parts[1]}"
    )
    ahead = [lv.concurrency for lv in decided if lv.status == "ahead"]
    behind = [lv.concurrency for lv in decided if lv.status == "behind"]

    def at(levels: Sequence[int]) -> str:
        return ", ".join(f"C={c}" for c in levels)

    if ahead and behind and max(ahead) < min(behind):
        text += (
            f"; on {figure.label} it is ahead up to C={max(ahead)} and behind from C={min(behind)}"
        )
    elif ahead or behind:
        shown = [f"ahead at {at(ahead)}"] if ahead else []
        shown += [f"behind at {at(behind)}"] if behind else []
        text += f"; on {figure.label} it is {' and '.join(shown)}"
    else:
        text += f"; on {figure.label} no level is shown ahead or behind"
    return text + "."


def _summary(
    levels: Sequence[LevelDecision],
    reference: Arm,
    candidate: Arm,
    figure: Figure,
    rate_mode: bool,
    cond: str,
) -> str:
    head = f"{candidate.title} against {reference.title} on {figure.label}"
    if rate_mode:
        head += " (fixed request rate: throughput is the offered rate, so it does not decide)"
    if not levels:
        return f"{head}: no level was tested by both arms."
    parts = []
    for status in ("ahead", "behind", "equivalent", "inconclusive", "not_comparable"):
        at = [f"C={lv.concurrency}" for lv in levels if lv.status == status]
        if at:
            parts.append(f"{_STATUS_WORDS[status]} at {', '.join(at)}")
    text = f"{head}: {'; '.join(parts)} ({cond})"
    if any(lv.within_run for lv in levels):
        text += f"; {WITHIN_RUN}"
    return text + "."


def decide_curves(
    reference: Curve,
    candidate: Curve,
    *,
    figure: str = "output_tok_s",
    rate_mode: bool = False,
    margin: float = DEFAULT_MARGIN,
    confidence: float = DEFAULT_CONFIDENCE,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    health: dict[int, tuple[ArmHealth, ArmHealth]] | None = None,
    drift: dict[int, float] | None = None,
    arms: tuple[Arm, Arm] | None = None,
) -> Decision:
    """``decide`` on two curves of ``figure`` (their levels' repeats, else requests, give the
    intervals as ``intervals.ratio_curve`` does); ``health`` maps C to (reference, candidate);
    ``arms`` names them (by default from the curves: name, speculative, engine)."""
    ratios = ratio_curve(reference, candidate, confidence=confidence, n_boot=n_boot, seed=seed)
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
