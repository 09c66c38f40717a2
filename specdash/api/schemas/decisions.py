"""The shape of ``benchlib.stats.decision.Decision.to_dict()``, declared once: every verdict of a
comparison carries it, and a test checks that the producer's dict and this schema agree field
for field (``tests/specdash/api/test_decision_schema.py``)."""

from __future__ import annotations

from typing import Literal

from ninja import Field, Schema

Status = Literal["ahead", "behind", "equivalent", "inconclusive", "not_comparable"]


class DecisionArmOut(Schema):
    name: str
    label: str
    speculative: bool
    engine: str = Field(description="The profile's engine key; empty when unknown")


class DecisionFigureOut(Schema):
    key: str = Field(description="The figure that decides, e.g. output_tok_s or tpot_p50_ms")
    label: str
    higher_is_better: bool
    throughput: bool


class DecisionRatioOut(Schema):
    point: float
    low: float | None
    high: float | None
    method: str = Field(
        description="repeats-* (between-run), batch-means-log-t or bootstrap-requests "
        "(within-run) or none"
    )
    confidence: float
    refused: str = Field(description="Why an interval was computed but not published")


class LevelDecisionOut(Schema):
    concurrency: int
    ratio: DecisionRatioOut = Field(description="Oriented: above 1 the candidate is better")
    repeats: int = Field(description="Runs per arm")
    status: Status
    reason: str
    within_run: bool = Field(description="The interval leaves out run-to-run variance")
    sentence: str


class CrossoverDecisionOut(Schema):
    lower_level: int
    upper_level: int
    direction: Literal["falls-behind", "pulls-ahead"]
    at: float = Field(description="Log-log interpolation between the two levels' points")
    sentence: str


class BandOut(Schema):
    start: int
    end: int | None = Field(description="Inclusive; null: no upper end")
    levels: list[int]
    action: Literal["on", "off", "none"] = Field(
        description="Speculation on, off, or no recommendation yet"
    )
    draft_length: int | None
    variant: str
    sentence: str


class EngineOptionOut(Schema):
    engine: str
    setting: str
    value: str
    note: str
    source: str
    version: str


class DecisionOut(Schema):
    reference: DecisionArmOut
    candidate: DecisionArmOut
    figure: DecisionFigureOut
    rate_mode: bool = Field(description="Fixed request rate: throughput does not decide")
    margin: float
    confidence: float
    levels: list[LevelDecisionOut]
    crossovers: list[CrossoverDecisionOut] = Field(
        description="Only between adjacent ahead and behind levels"
    )
    bands: list[BandOut]
    engine_options: list[EngineOptionOut]
    summary: str
    recommendation: str
    why: str = Field(
        "",
        description="One line on the trade-off: ITL and TTFT p50 at the lowest level against "
        'the reference, and where the deciding figure turns ("" without latency figures)',
    )
    within_run: bool
    behind_from: int | None = Field(
        None, description="Smallest tested C from which every level is behind (by status)"
    )
    ahead_from: int | None = Field(
        None, description="Smallest tested C from which every level is ahead (by status)"
    )
    statements: list[str] = Field(description="Every sentence, in the order surfaces print")
