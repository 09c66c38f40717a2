"""One decision per comparison, as an object: the status of every level, the crossovers, the
recommendation and the sentence for each, computed once from the evidence and rendered by every
surface (the page, the API, the report, the benchmark scripts).

This module holds the object and the evidence it is made from; the rule that fills it is
``decision_rule`` (statuses, crossovers, bands: read its notes for what each status means) and
its sentences are ``decision_wording``. They are apart so that a surface that only reads a
decision, and the variants' matrix that builds one of its own (``decision_matrix``), import the
shapes without the rule.

Defaults: a margin of 2% (the run-to-run spread of the same server on a quiet machine is about
1%; a 2% difference is the smallest that the shipped repeats resolve and that is worth a
configuration change) and the 95% confidence of ``intervals``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from benchlib.stats.engines import EngineOption
from benchlib.stats.types import Ratio

Status = Literal["ahead", "behind", "equivalent", "inconclusive", "not_comparable"]
Action = Literal["on", "off", "none"]

DEFAULT_MARGIN = 0.02
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
