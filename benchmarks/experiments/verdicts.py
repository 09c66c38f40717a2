"""A comparison's verdicts as stored and rendered: the statistics' verdict (ratios per level,
crossover, saturation, engine options) and the decision's advice, as plain JSON-able dicts.

Apart from the comparison (comparison.py), which decides what to compare and with what: these
are the shapes every surface reads (the comparison page, the CSV, the HTML report, the API and
a profile's history), declared once here next to the functions that build them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NotRequired, TypedDict, cast

from benchlib.json_types import JsonObject
from benchlib.stats.crossover import Crossing, Direction
from benchlib.stats.decision import Decision
from benchlib.stats.engines import EngineOption
from benchlib.stats.saturation import Saturation
from benchlib.stats.speculative_schedule import vllm_speculative_config
from benchlib.stats.types import Ratio, RatioMethod
from benchlib.stats.verdict import Verdict
from benchmarks.experiments.level_runs import SeriesCurve


class RatioEntry(TypedDict):
    """B/A at one level with its interval (``ratio_entry``): the level, then what is stored of
    ``benchlib.stats.types.Ratio`` (its fields and its ``sign`` and ``inconclusive``)."""

    concurrency: int
    point: float
    low: float | None
    high: float | None
    method: RatioMethod
    sign: int
    inconclusive: bool
    refused: str


class CrossingEntry(TypedDict):
    """Where the ratio crosses 1 between two tested levels: ``benchlib.stats.crossover.Crossing``
    as stored (``crossing_entry``)."""

    concurrency: float
    lower_level: int
    upper_level: int
    direction: Direction
    has_interval: bool
    low: float | None
    high: float | None
    conclusive: bool


class CrossoverEntry(TypedDict):
    crossings: list[CrossingEntry]
    last: CrossingEntry | None
    reason: str | None
    inconclusive_levels: list[int]


class SaturationEntry(TypedDict):
    """Where a curve stops gaining (``saturation_dict``): what is stored of
    ``benchlib.stats.saturation.Saturation``."""

    saturated: bool
    concurrency: int | None
    throughput: float
    peak_concurrency: int
    last_gain_per_doubling: float | None
    reason: str


class EngineOptionEntry(TypedDict):
    """``benchlib.stats.engines.EngineOption`` as stored (``engine_option_entry``)."""

    engine: str
    setting: str
    value: str
    note: str
    source: str
    version: str


class VerdictEntry(TypedDict):
    """One candidate against the reference (``verdict_entry``), with the decision's advice
    added (``advice_fields``). A goodput verdict where one side delivers no goodput at any
    level carries only the sides, no ratios and its text (so the rest is NotRequired)."""

    reference: str
    candidate: str
    reference_name: str
    candidate_name: str
    ratios: list[RatioEntry]
    unmatched: NotRequired[list[int]]
    crossover: NotRequired[CrossoverEntry]
    reference_saturation: NotRequired[SaturationEntry]
    candidate_saturation: NotRequired[SaturationEntry]
    saturation_ratio: NotRequired[float]
    speculative: NotRequired[bool]
    speculative_name: NotRequired[str]
    disable_speculation_above: NotRequired[int | None]
    engine_options: NotRequired[list[EngineOptionEntry]]
    # The decision's advice (``advice_fields``); the decision itself as Decision.to_dict
    # writes it.
    decision: NotRequired[JsonObject]
    text: NotRequired[str]
    behind_from: NotRequired[int | None]
    ahead_from: NotRequired[int | None]
    settled_conclusively: NotRequired[bool]
    # Throughput verdicts only: the vLLM --speculative-config with the switch added.
    vllm_speculative_config: NotRequired[str | None]


def ratio_entry(concurrency: int, ratio: Ratio) -> RatioEntry:
    # Written out, so the type checker holds each key to the entry; what is stored of the
    # ratio is a choice (its confidence is not), so it is not derived from the dataclass.
    return {
        "concurrency": concurrency,
        "point": ratio.point,
        "low": ratio.low,
        "high": ratio.high,
        "method": ratio.method,
        "sign": ratio.sign,
        "inconclusive": ratio.inconclusive,
        "refused": ratio.refused,
    }


def crossing_entry(c: Crossing) -> CrossingEntry:
    # The whole crossing, in its fields' order (a test checks the entry declares the same).
    return cast(CrossingEntry, dataclasses.asdict(c))


def saturation_dict(s: Saturation) -> SaturationEntry:
    return {
        "saturated": s.saturated,
        "concurrency": s.concurrency,
        "throughput": s.throughput,
        "peak_concurrency": s.peak_concurrency,
        "last_gain_per_doubling": s.last_gain_per_doubling,
        "reason": s.reason,
    }


def engine_option_entry(o: EngineOption) -> EngineOptionEntry:
    # The whole option, in its fields' order (a test checks the entry declares the same).
    return cast(EngineOptionEntry, dataclasses.asdict(o))


def advice_fields(decision: Decision, entry: VerdictEntry) -> None:
    """Add the decision, and the verdict's advice fields read from it (not from the points),
    to ``entry``, so that an API client reading ``disable_speculation_above`` gets the
    decision's answer: N for "on up to N, off above", 0 for "serve without", None otherwise;
    ``behind_from`` / ``ahead_from`` from its statuses."""
    actions = [band.action for band in decision.bands]
    above: int | None = None
    if actions == ["off"]:
        above = 0
    elif decision.engine_options:
        above = decision.bands[0].end
    out = decision.to_dict()
    settled = decision.behind_from if decision.behind_from is not None else decision.ahead_from
    entry.update(
        {
            "decision": out,
            "text": " ".join(decision.statements()),
            # Where the candidate is behind (ahead) at every level from there on, by the
            # decision's statuses on its deciding figure: never from the points alone.
            "behind_from": decision.behind_from,
            "ahead_from": decision.ahead_from,
            "settled_conclusively": settled is not None,
            "disable_speculation_above": above,
            "engine_options": out["engine_options"],
        }
    )


def vllm_config(verdict: VerdictEntry, built: Sequence[SeriesCurve]) -> str | None:
    """The speculative profile's own --speculative-config with the switch added, when it is a
    vLLM profile: a value to paste, which vLLM validates at start-up (speculative_schedule)."""
    above = verdict.get("disable_speculation_above")
    if not above:
        return None
    for data, curve, _ in built:
        if curve.name != verdict.get("speculative_name"):
            continue
        for env in data.environment:
            argv = env.get("launch_argv") or []
            if env.get("engine") == "vllm" and isinstance(argv, list):
                config = vllm_speculative_config(argv, int(above))
                if config is not None:
                    return config
    return None


def verdict_entry(v: Verdict, labels: dict[str, str]) -> VerdictEntry:
    last = v.crossover.last
    return {
        "reference": labels[v.reference],
        "candidate": labels[v.candidate],
        "reference_name": v.reference,
        "candidate_name": v.candidate,
        "ratios": [ratio_entry(lr.concurrency, lr.ratio) for lr in v.ratios.levels],
        "unmatched": list(v.ratios.unmatched),
        "crossover": {
            "crossings": [crossing_entry(c) for c in v.crossover.crossings],
            "last": crossing_entry(last) if last is not None else None,
            "reason": v.crossover.reason,
            "inconclusive_levels": list(v.crossover.inconclusive_levels),
        },
        "reference_saturation": saturation_dict(v.reference_saturation),
        "candidate_saturation": saturation_dict(v.candidate_saturation),
        "saturation_ratio": v.saturation_ratio,
        "speculative": v.candidate_speculative or v.reference_speculative,
        "speculative_name": v.candidate if v.candidate_speculative else v.reference,
        "disable_speculation_above": v.disable_speculation_above,
        "engine_options": [engine_option_entry(o) for o in v.engine_options],
    }
