"""Controller tracking: what a load-adaptive speculation schedule did, second by second.

An engine that picks its draft length from the running batch (SGLang's
``--speculative-adaptive`` tiers, vLLM's ``num_speculative_tokens_per_batch_size``, the
schedules specdash writes) switches inside a level; a per-level average hides the switch and
what it cost. From the server's own /metrics, scraped about once a second during a level,
this module builds the series (drafted tokens per step, tokens per step, acceptance,
throughput), finds the switches (a change of the drafted-tokens-per-step level between two
scrapes) and the cost of each (throughput in the seconds before against the seconds after,
and the acceptance after it against before). Django-free; docs/measurement.md, "Controller
tracking".

Sources, per engine (the names as the engines export them, docs/engines.md):

* SGLang: the gauges ``sglang:spec_num_steps`` (the active tier: the last step's draft
  steps), ``sglang:spec_accept_length`` (tokens per verify step), ``sglang:spec_accept_rate``
  and ``sglang:gen_throughput``. The last three are SGLang's recent-window figures (its last
  logging interval), so they lag the tier by up to one window; its counters move only when a
  request finishes, which is too coarse for one second.
* vLLM: the counters ``vllm:generation_tokens_total``, ``vllm:spec_decode_num_drafts_total``,
  ``vllm:spec_decode_num_draft_tokens_total`` and ``vllm:spec_decode_num_accepted_tokens_total``,
  differenced between consecutive scrapes. vLLM counts drafting steps only, so a second's
  drafted tokens per step is that of the steps that drafted (0 when none did).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from benchlib.stats.controller_types import (
    ControllerFigures,
    ControllerSeries,
    Source,
    SwitchRow,
    TierReadings,
)

SGLANG_TIER = "sglang:spec_num_steps"
SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"
SGLANG_THROUGHPUT = "sglang:gen_throughput"
VLLM_GENERATED = "vllm:generation_tokens_total"
VLLM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
TRACKED = (
    SGLANG_TIER,
    SGLANG_ACCEPT_LENGTH,
    SGLANG_ACCEPT_RATE,
    SGLANG_THROUGHPUT,
    VLLM_GENERATED,
    VLLM_DRAFTS,
    VLLM_DRAFT_TOKENS,
    VLLM_ACCEPTED,
)
_PREFIXES = tuple(name + "{" for name in TRACKED) + tuple(name + " " for name in TRACKED)

# The scrape period: a switch is placed within it, so its time is known to +- half of it.
INTERVAL_S = 1.0
# Seconds of series on each side of a switch that its cost is measured over.
COST_WINDOW_S = 3
# The fast read of SGLang's tier gauge alone (``/metrics?name[]=sglang:spec_num_steps``), from
# which the switches are found: a flap out and back is seen when a reading falls inside it, so
# the shortest flap always seen is this period (docs/measurement.md, "Controller tracking").
TIER_INTERVAL_S = 0.05


def scrape_values(text: str) -> dict[str, float]:
    """The tracked families of one /metrics text: a gauge as the mean over its series (one per
    TP/DP rank, equal under TP), a counter as the sum over its label sets. Only lines that
    start with a tracked name are parsed, so a scrape costs one pass over the text."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith(_PREFIXES):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        try:
            value = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        if not math.isfinite(value):
            continue
        sums[name] = sums.get(name, 0.0) + value
        counts[name] = counts.get(name, 0) + 1
    return {
        name: total if name.endswith("_total") else total / counts[name]
        for name, total in sums.items()
    }


def tier_reading(text: str) -> float | None:
    """SGLang's active tier in one /metrics text (the mean over its rank series), or None
    where the server exports no tier (no speculation, or another engine)."""
    total, count = 0.0, 0
    for line in text.splitlines():
        if line.startswith(_TIER_PREFIXES):
            try:
                value = float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
            if math.isfinite(value):
                total, count = total + value, count + 1
    return total / count if count else None


_TIER_PREFIXES = (SGLANG_TIER + "{", SGLANG_TIER + " ")


@dataclass(frozen=True)
class ControllerPoint:
    """One second of the series (the interval that ends at the scrape ``t``)."""

    t: float
    drafted_per_step: float | None
    tokens_per_step: float | None
    acceptance: float | None
    throughput: float | None


def source_of(scrapes: Sequence[Mapping[str, float]]) -> Source | None:
    """Which engine's figures the scrapes carry (None: neither engine's)."""
    if any(SGLANG_TIER in s or SGLANG_THROUGHPUT in s for s in scrapes):
        return "sglang_gauges"
    if any(VLLM_DRAFTS in s or VLLM_GENERATED in s for s in scrapes):
        return "vllm_counters"
    return None


def controller_series(
    times: Sequence[float], scrapes: Sequence[Mapping[str, float]]
) -> tuple[Source | None, list[ControllerPoint]]:
    """The per-second series of scrapes taken at ``times`` (epoch seconds, increasing). A
    server without speculation (the static "off" arm) drafts 0 tokens per step throughout."""
    source = source_of(scrapes)
    if source == "sglang_gauges":
        speculative = any(SGLANG_TIER in s for s in scrapes)
        return source, [
            _sglang_point(t, s, speculative) for t, s in zip(times, scrapes, strict=True)
        ]
    if source == "vllm_counters":
        pairs = itertools.pairwise(zip(times, scrapes, strict=True))
        points = [_vllm_point(t1, t1 - t0, s0, s1) for (t0, s0), (t1, s1) in pairs]
        return source, points
    return None, []


def _sglang_point(t: float, s: Mapping[str, float], speculative: bool) -> ControllerPoint:
    if not speculative:
        return ControllerPoint(t, 0.0, 1.0, None, s.get(SGLANG_THROUGHPUT))
    tier = s.get(SGLANG_TIER)
    drafting = tier is not None and tier > 0
    return ControllerPoint(
        t=t,
        drafted_per_step=tier,
        tokens_per_step=s.get(SGLANG_ACCEPT_LENGTH),
        # Nothing drafted at this tier: no acceptance to read (the gauge would say 0).
        acceptance=s.get(SGLANG_ACCEPT_RATE) if drafting else None,
        throughput=s.get(SGLANG_THROUGHPUT),
    )


def _vllm_point(
    t: float, dt: float, s0: Mapping[str, float], s1: Mapping[str, float]
) -> ControllerPoint:
    def delta(name: str) -> float:
        return s1.get(name, 0.0) - s0.get(name, 0.0)

    generated, drafts = delta(VLLM_GENERATED), delta(VLLM_DRAFTS)
    draft_tokens, accepted = delta(VLLM_DRAFT_TOKENS), delta(VLLM_ACCEPTED)
    if drafts > 0:
        return ControllerPoint(
            t=t,
            drafted_per_step=draft_tokens / drafts,
            tokens_per_step=1.0 + accepted / drafts,
            acceptance=accepted / draft_tokens if draft_tokens > 0 else None,
            throughput=generated / dt if dt > 0 else None,
        )
    return ControllerPoint(
        t=t,
        # Tokens made and none drafted: the schedule had drafting off all second.
        drafted_per_step=0.0 if generated > 0 else None,
        tokens_per_step=1.0 if generated > 0 else None,
        acceptance=None,
        throughput=generated / dt if dt > 0 else None,
    )


@dataclass(frozen=True)
class Switch:
    """A change of the drafted-tokens-per-step level between two scrapes, with its cost."""

    t: float  # the middle of the interval it happened in (+- half the scrape period)
    window: tuple[float, float]  # the two scrapes it fell between
    before: float
    after: float
    throughput_before: float | None
    throughput_after: float | None
    throughput_change: float | None  # after / before - 1
    acceptance_before: float | None
    acceptance_after: float | None
    acceptance_drop: float | None  # before - after, where both drafted
    # Fast tier readings only: switches with no whole per-second point between them form one
    # episode (a flap out and back, or a tier crossed several times in a second); each carries
    # the episode's cost, its first reading before to its last after, as no second is clean
    # between them. None for a switch that stands alone.
    episode: tuple[float, float] | None = None
    episode_switches: int = 1


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def detect_switches(
    points: Sequence[ControllerPoint], *, window: int = COST_WINDOW_S
) -> list[Switch]:
    """Every change of ``drafted_per_step`` between consecutive points that both have one.
    Its cost compares the ``window`` points before it with the ``window`` after, each side
    stopping at a neighbouring switch; the point that straddles it (its scrape interval mixes
    both levels, and SGLang's windowed gauges lag) belongs to neither side."""
    known = [i for i, p in enumerate(points) if p.drafted_per_step is not None]
    level = [round(p.drafted_per_step or 0.0, 3) for p in points]
    edges = [(i, j) for i, j in itertools.pairwise(known) if level[i] != level[j]]
    switches: list[Switch] = []
    for n, (i, j) in enumerate(edges):
        lo = edges[n - 1][1] if n else 0
        hi = edges[n + 1][0] + 1 if n + 1 < len(edges) else len(points)
        before = points[max(lo, i + 1 - window) : i + 1]
        after = points[j + 1 : min(hi, j + 1 + window)]
        switches.append(
            _costed(
                points[i].t,
                points[j].t,
                float(points[i].drafted_per_step or 0.0),
                float(points[j].drafted_per_step or 0.0),
                before,
                after,
            )
        )
    return switches


def detect_tier_switches(
    tier_times: Sequence[float],
    tiers: Sequence[float],
    points: Sequence[ControllerPoint],
    *,
    window: int = COST_WINDOW_S,
) -> list[Switch]:
    """Every change of the tier between consecutive fast readings, placed at the middle of the
    two; its cost from the per-second ``points``: the ``window`` points wholly before it against
    the ``window`` wholly after (a point covers the interval from the previous point's scrape
    to its own; the one that straddles the switch belongs to neither side). Switches with no
    whole point between them form an episode, costed as one: the points before its first
    switch against those after its last, each side stopping at a neighbouring episode."""
    levels = [round(t, 3) for t in tiers]
    edges = [(i, j) for i, j in itertools.pairwise(range(len(levels))) if levels[i] != levels[j]]
    starts = [points[0].t - INTERVAL_S, *(p.t for p in points[:-1])] if points else []
    spans = list(zip(starts, points, strict=True))

    def clean(lo: float, hi: float) -> list[ControllerPoint]:
        return [p for start, p in spans if start >= lo and p.t <= hi]

    episodes: list[list[tuple[int, int]]] = []
    for edge in edges:
        if episodes and not clean(tier_times[episodes[-1][-1][1]], tier_times[edge[0]]):
            episodes[-1].append(edge)
        else:
            episodes.append([edge])
    switches: list[Switch] = []
    for n, episode in enumerate(episodes):
        lo, hi = tier_times[episode[0][0]], tier_times[episode[-1][1]]
        previous = tier_times[episodes[n - 1][-1][1]] if n else -math.inf
        following = tier_times[episodes[n + 1][0][0]] if n + 1 < len(episodes) else math.inf
        before, after = clean(previous, lo)[-window:], clean(hi, following)[:window]
        for i, j in episode:
            switch = _costed(
                tier_times[i], tier_times[j], float(tiers[i]), float(tiers[j]), before, after
            )
            if len(episode) > 1:
                switch = dataclasses.replace(
                    switch, episode=(lo, hi), episode_switches=len(episode)
                )
            switches.append(switch)
    return switches


def _costed(
    lo: float,
    hi: float,
    level_before: float,
    level_after: float,
    before: Sequence[ControllerPoint],
    after: Sequence[ControllerPoint],
) -> Switch:
    tp_before = _mean(p.throughput for p in before)
    tp_after = _mean(p.throughput for p in after)
    acc_before = _mean(p.acceptance for p in before)
    acc_after = _mean(p.acceptance for p in after)
    return Switch(
        t=(lo + hi) / 2,
        window=(lo, hi),
        before=level_before,
        after=level_after,
        throughput_before=tp_before,
        throughput_after=tp_after,
        throughput_change=(
            tp_after / tp_before - 1.0 if tp_before and tp_after is not None else None
        ),
        acceptance_before=acc_before,
        acceptance_after=acc_after,
        acceptance_drop=(
            acc_before - acc_after if acc_before is not None and acc_after is not None else None
        ),
    )


def controller_figures(
    times: Sequence[float],
    scrapes: Sequence[Mapping[str, float]],
    *,
    opened_at: float,
    tier_times: Sequence[float] = (),
    tiers: Sequence[float] = (),
    tier_interval_s: float = TIER_INTERVAL_S,
) -> ControllerFigures | None:
    """What a level's summary keeps (plain JSON): the series, as seconds since the level
    opened, and the switches with their costs; None when the scrapes carry neither engine's
    figures. With fast readings of SGLang's tier (``tier_times``, ``tiers``) the switches come
    from them, which sees flaps shorter than the per-second scrape; without, from the series."""
    source, points = controller_series(times, scrapes)
    if source is None:
        return None
    fast = source == "sglang_gauges" and len(tiers) >= 2
    switches = detect_tier_switches(tier_times, tiers, points) if fast else detect_switches(points)
    figures = ControllerFigures(
        source=source,
        interval_s=INTERVAL_S,
        opened_at=opened_at,
        series=ControllerSeries(
            t_s=[round(p.t - opened_at, 3) for p in points],
            drafted_per_step=[p.drafted_per_step for p in points],
            tokens_per_step=[p.tokens_per_step for p in points],
            acceptance=[p.acceptance for p in points],
            throughput=[p.throughput for p in points],
        ),
        switches=[_switch_row(s, opened_at) for s in switches],
        switches_from="tier_readings" if fast else "series",
    )
    if fast:
        figures["tier_readings"] = TierReadings(
            interval_s=tier_interval_s,
            t_s=[round(t - opened_at, 3) for t in tier_times],
            drafted_per_step=list(tiers),
        )
    return figures


def _switch_row(s: Switch, opened_at: float) -> SwitchRow:
    # In the order of the fields, then the times from the opening (as ``asdict`` plus them
    # would give).
    return SwitchRow(
        t=s.t,
        window=list(s.window),
        before=s.before,
        after=s.after,
        throughput_before=s.throughput_before,
        throughput_after=s.throughput_after,
        throughput_change=s.throughput_change,
        acceptance_before=s.acceptance_before,
        acceptance_after=s.acceptance_after,
        acceptance_drop=s.acceptance_drop,
        episode=list(s.episode) if s.episode else None,
        episode_switches=s.episode_switches,
        t_s=round(s.t - opened_at, 3),
        episode_s=[round(t - opened_at, 3) for t in s.episode] if s.episode else None,
    )


@dataclass(frozen=True)
class SwitchMatch:
    """Detected switches held against the true ones (a server's own log of them)."""

    truth: tuple[float, ...]
    nearest_s: tuple[float | None, ...]  # per true switch: the distance to the nearest detected
    unmatched_detected: tuple[float, ...]  # detected with no true switch within the tolerance
    tolerance_s: float

    @property
    def missed(self) -> tuple[float, ...]:
        return tuple(
            t
            for t, d in zip(self.truth, self.nearest_s, strict=True)
            if d is None or d > self.tolerance_s
        )


def match_switches(
    detected: Sequence[float], truth: Sequence[float], *, tolerance_s: float = 1.0
) -> SwitchMatch:
    """Each true switch time against the nearest detected one, and the detected ones that
    lie farther than ``tolerance_s`` from every true switch."""
    nearest = tuple(min((abs(d - t) for d in detected), default=None) for t in truth)
    stray = tuple(d for d in detected if all(abs(d - t) > tolerance_s for t in truth))
    return SwitchMatch(tuple(truth), nearest, stray, tolerance_s)


def hidden_between_scrapes(
    truth: Sequence[tuple[float, float, float]], scrape_times: Sequence[float]
) -> tuple[float, ...]:
    """The true switches ``(t, from, to)`` that no once-per-interval reading of the level can
    show: those between two consecutive scrapes whose first ``from`` equals their last ``to``
    (a flap out and back inside one interval leaves both scrapes reading the same level)."""
    times = sorted(scrape_times)
    by_interval: dict[int, list[tuple[float, float, float]]] = {}
    for switch in sorted(truth):
        k = bisect.bisect_left(times, switch[0])
        by_interval.setdefault(k, []).append(switch)
    hidden: list[float] = []
    for k, inside in by_interval.items():
        if 0 < k < len(times) and inside[0][1] == inside[-1][2]:
            hidden.extend(t for t, _, _ in inside)
    return tuple(sorted(hidden))
