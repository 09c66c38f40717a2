"""Server-side figures for exactly one sweep level, from `/metrics` scraped at its boundaries.

The sweep job hands every load-generator event to `LevelServerMetrics.observe` after its own
recorder: a `measure_start` (after the level's warm-up, right before its first measured
request) is marked with one scrape, the matching `level_summary` with another, and the counter
differences between the two (hosts.telemetry.deltas) become the level's `server_metrics`:
accept length = 1 + accepted/drafts over that level's measured requests alone, never the
server's lifetime average nor its warm-up. Where the interval opened relative to the first
measured request (and to a split level's common start) is stored with it and checked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, NotRequired, TypedDict

import httpx

from benchlib.loadgen.events import (
    BoundaryFields,
    LevelSummaryEvent,
    LoadgenEvent,
    MeasureStartEvent,
)
from hosts.telemetry.deltas import HistogramSummary, IntervalMetrics, interval_between
from hosts.telemetry.engine_profiles import PROFILES
from hosts.telemetry.prometheus import EngineMetrics, MetricsParseError, parse_engine_metrics

logger = logging.getLogger(__name__)


class HistogramFigures(TypedDict):
    """A server-side latency histogram's summary (deltas.HistogramSummary) as stored."""

    count: float
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


class ServerMetrics(TypedDict):
    """`SweepLevel.server_metrics`: a level's server-side figures over its measured interval.

    Unavailable: ``available`` False and ``reason`` only. Available: the interval's figures
    (`interval_as_dict`), the ITL histogram's name, and where the interval opened
    (`interval_opening`, absent when the opening scrape is missing).
    """

    available: bool
    reason: NotRequired[str]
    engine: NotRequired[str]
    started_at: NotRequired[float]
    ended_at: NotRequired[float]
    duration_s: NotRequired[float]
    prompt_tokens: NotRequired[float | None]
    generation_tokens: NotRequired[float | None]
    generation_tps: NotRequired[float | None]
    spec_drafts: NotRequired[float | None]
    spec_draft_tokens: NotRequired[float | None]
    spec_accepted_tokens: NotRequired[float | None]
    accept_length: NotRequired[float | None]
    accept_length_source: NotRequired[str | None]
    accept_length_note: NotRequired[str]
    acceptance_rate: NotRequired[float | None]
    acceptance_rate_source: NotRequired[str | None]
    requests: NotRequired[float | None]
    tokens_per_step: NotRequired[float | None]
    tokens_per_step_source: NotRequired[str | None]
    prefix_cache_hit_rate: NotRequired[float | None]
    prefix_cache_hit_rate_source: NotRequired[str | None]
    itl_unit: NotRequired[Literal["engine_step", "token", "request_tpot"]]
    itl_histogram: NotRequired[str | None]
    ttft_resolution_s: NotRequired[float | None]
    ttft_bucket_limited: NotRequired[bool]
    ttft_s: NotRequired[HistogramFigures | None]
    itl_s: NotRequired[HistogramFigures | None]
    e2e_s: NotRequired[HistogramFigures | None]
    reset: NotRequired[bool]
    appeared: NotRequired[list[str]]
    disappeared: NotRequired[list[str]]
    opened_after_warmup_s: NotRequired[float | None]
    opened_before_start_at_s: NotRequired[float | None]
    opened_before_first_request_s: NotRequired[float | None]
    interval_order_ok: NotRequired[bool | None]


class IntervalOpening(TypedDict):
    """Where a level's server-side interval opened (`interval_opening`), merged into its
    `ServerMetrics`."""

    opened_after_warmup_s: float | None
    opened_before_start_at_s: float | None
    opened_before_first_request_s: float | None
    interval_order_ok: bool | None


class BoundaryScrape(TypedDict):
    """One raw /metrics scrape at a level boundary: when (epoch seconds) and its text."""

    t: float
    text: str


class LevelScrapes(TypedDict):
    """A level's two raw boundary scrapes, as `Keep` receives them (and the audit reads)."""

    open: BoundaryScrape
    close: BoundaryScrape


Save = Callable[[int, int, ServerMetrics], Awaitable[None]]
Scrape = Callable[[], Awaitable[EngineMetrics]]
# Keeps a level's raw boundary scrapes, by level index.
Keep = Callable[[int, LevelScrapes], Awaitable[None]]


def _summary(value: HistogramSummary | None) -> HistogramFigures | None:
    if value is None:
        return None
    # The keys in the dataclass's field order, as dataclasses.asdict wrote them.
    return {
        "count": value.count,
        "mean": value.mean,
        "p50": value.p50,
        "p90": value.p90,
        "p99": value.p99,
    }


def interval_as_dict(interval: IntervalMetrics) -> ServerMetrics:
    """An interval as the JSON stored in `SweepLevel.server_metrics`."""
    return {
        "available": True,
        "engine": str(interval.engine),
        "started_at": interval.started_at,
        "ended_at": interval.ended_at,
        "duration_s": interval.duration_s,
        "prompt_tokens": interval.prompt_tokens,
        "generation_tokens": interval.generation_tokens,
        "generation_tps": interval.generation_tps,
        "spec_drafts": interval.spec_drafts,
        "spec_draft_tokens": interval.spec_draft_tokens,
        "spec_accepted_tokens": interval.spec_accepted_tokens,
        "accept_length": interval.accept_length,
        "accept_length_source": interval.accept_length_source,
        "acceptance_rate": interval.acceptance_rate,
        "acceptance_rate_source": interval.acceptance_rate_source,
        "requests": interval.requests,
        "tokens_per_step": interval.tokens_per_step,
        "tokens_per_step_source": interval.tokens_per_step_source,
        "prefix_cache_hit_rate": interval.prefix_cache_hit_rate,
        "prefix_cache_hit_rate_source": interval.prefix_cache_hit_rate_source,
        # What each server-side latency measures (docs/measurement.md): vLLM's ITL is one
        # sample per engine step (a verify step under speculation), SGLang's one per token.
        "itl_unit": "engine_step" if PROFILES[interval.engine].itl_per_engine_step else "token",
        "ttft_resolution_s": interval.ttft_resolution_s,
        # True when the TTFT quantiles below are bucket interpolations (docs/measurement.md).
        "ttft_bucket_limited": interval.ttft_bucket_limited,
        "ttft_s": _summary(interval.ttft),
        "itl_s": _summary(interval.itl),
        "e2e_s": _summary(interval.e2e),
        "reset": interval.reset,
        "appeared": [str(ref) for ref in interval.appeared],
        "disappeared": [str(ref) for ref in interval.disappeared],
    }


# Why an accept length per drafted step is not given for a server whose schedule can draft
# nothing at some batch sizes (SGLang's --speculative-adaptive; its built-in tiers end in
# "candidate_steps": [0]): its only speculative counter counts every decode step.
UNDRAFTED_STEPS_REASON = (
    "not determinable: with --speculative-adaptive a tier can draft 0 steps, and SGLang counts "
    "those decode steps as verify calls too, so (generated - requests) / verify calls is tokens "
    "per engine step, not per drafted step"
)


def level_server_metrics(
    before: EngineMetrics | None,
    after: EngineMetrics | None,
    *,
    problem: str = "",
    undrafted_steps: bool = False,
) -> ServerMetrics:
    """The level's server figures from its two boundary scrapes. ``undrafted_steps``: the
    server may run decode steps that draft nothing (an adaptive schedule with a 0-step tier),
    so a figure over verify calls is tokens per step only, never accept length per drafted step.
    """
    if before is None or after is None:
        return {"available": False, "reason": problem or "no /metrics scrape at a boundary"}
    try:
        figures = interval_as_dict(interval_between(before, after))
    except ValueError as exc:  # e.g. the engine changed between the two scrapes
        return {"available": False, "reason": str(exc)}
    if undrafted_steps and figures.get("accept_length_source") == "verify_counters":
        figures["accept_length"] = None
        figures["accept_length_source"] = "not_determinable"
        figures["accept_length_note"] = UNDRAFTED_STEPS_REASON
    if (
        not PROFILES[after.engine].itl_per_engine_step
        and after.itl_histogram is not None
        and after.itl_histogram.endswith(":time_per_output_token_seconds")
    ):
        # SGLang without its ITL histogram: the fallback is one TPOT sample per request.
        figures["itl_unit"] = "request_tpot"
    figures["itl_histogram"] = after.itl_histogram
    return figures


def _time(event: Mapping[str, object], key: str) -> float | None:
    value = event.get(key)
    return float(value) if isinstance(value, int | float) else None


def interval_opening(
    opened_at: float,
    *,
    summary: Any,
    start_at: float | None = None,
    warmed_at: float | None = None,
) -> IntervalOpening:
    """Where the level's server-side interval opened (the opening scrape's time): seconds
    after the end of the warm-up (the latest shard's, for a split level), before the common
    start of a split level's shards, and before the first measured request (from the level
    summary's `window_wall`). `interval_order_ok` is false when any of them is negative: the
    interval then holds warm-up requests or misses part of the level."""
    before_first_request = None
    window = summary.get("window_wall") if isinstance(summary, dict) else None
    if isinstance(window, list | tuple) and window and isinstance(window[0], int | float):
        before_first_request = float(window[0]) - opened_at
    after_warmup = None if warmed_at is None else opened_at - warmed_at
    before_start_at = None if start_at is None else start_at - opened_at
    leads = [v for v in (after_warmup, before_start_at, before_first_request) if v is not None]
    return {
        "opened_after_warmup_s": after_warmup,
        "opened_before_start_at_s": before_start_at,
        "opened_before_first_request_s": before_first_request,
        "interval_order_ok": all(v >= 0 for v in leads) if leads else None,
    }


class LevelServerMetrics:
    """Marks a sweep's level boundaries with scrapes and saves each level's figures."""

    def __init__(
        self,
        *,
        sweep_id: int,
        scrape: Scrape,
        save: Save,
        keep: Keep | None = None,
        undrafted_steps: bool = False,
    ):
        self.sweep_id = sweep_id
        self.undrafted_steps = undrafted_steps
        self.scrape = scrape
        self.save = save
        self.keep = keep
        # The last scrape taken here (set by for_sweep's scrape), for `keep`.
        self.last_scrape: BoundaryScrape | None = None
        self._raw: dict[int, BoundaryScrape | None] = {}
        self.problems: list[str] = []
        self._before: dict[int, EngineMetrics | None] = {}
        self._opening: dict[int, tuple[float | None, float | None]] = {}

    @staticmethod
    def metrics_url(base_url: str) -> str:
        return base_url.rstrip("/") + "/metrics"

    @classmethod
    def for_sweep(
        cls,
        sweep_id: int,
        base_url: str,
        *,
        save: Save,
        keep: Keep | None = None,
        undrafted_steps: bool = False,
        metrics_url: str = "",
    ) -> LevelServerMetrics:
        url = metrics_url or cls.metrics_url(base_url)

        async def scrape() -> EngineMetrics:
            # No keep-alive: a pooled connection would outlive the level on the server's port.
            limits = httpx.Limits(max_keepalive_connections=0)
            async with httpx.AsyncClient(timeout=httpx.Timeout(5.0), limits=limits) as client:
                response = await client.get(url)
                response.raise_for_status()
            # `marks` is bound below, before the first scrape can run.
            last: BoundaryScrape = {"t": time.time(), "text": response.text}
            marks.last_scrape = last
            return parse_engine_metrics(last["text"], scraped_at=last["t"])

        marks = cls(
            sweep_id=sweep_id,
            scrape=scrape,
            save=save,
            keep=keep,
            undrafted_steps=undrafted_steps,
        )
        return marks

    async def observe(self, event: LoadgenEvent) -> None:
        """Never raises: a server without metrics leaves the level's figures unavailable.
        ``event``: one load-generator event as parsed; a level's measure_start opens its
        interval, its level_summary closes it, the others are not read here."""
        if event["event"] == "measure_start" or event["event"] == "level_summary":
            await self._boundary(event)

    async def _boundary(self, event: MeasureStartEvent | LevelSummaryEvent) -> None:
        index = event["level_index"]
        raw: BoundaryScrape | None = None
        if "server_metrics_text" in event or "server_metrics_error" in event:
            # The load generator scraped right before the level's first request (or after its
            # last response): a scrape here, after reading the event, would come after the
            # level's opening burst, or after the next level had begun.
            metrics, problem, raw = self._parse_boundary(event)
        else:
            self.last_scrape = None
            metrics, problem = await self._scrape()
            if metrics is not None and self.last_scrape is not None:
                raw = self.last_scrape.copy()
        if event["event"] == "measure_start":
            self._before[index] = metrics
            self._raw[index] = raw
            self._opening[index] = (_time(event, "start_at"), _time(event, "warmed_at"))
            return
        opened = self._raw.pop(index, None)
        if self.keep is not None and opened is not None and raw is not None:
            try:
                await self.keep(index, {"open": opened, "close": raw})
            except Exception:
                logger.warning("sweep %s: keeping level %s scrapes failed", self.sweep_id, index)
        before = self._before.pop(index, None)
        start_at, warmed_at = self._opening.pop(index, (None, None))
        # A split level's shards report the end of their warm-up with their summaries.
        warmed_at = _time(event, "warmed_at") or warmed_at
        figures = level_server_metrics(
            before, metrics, problem=problem, undrafted_steps=self.undrafted_steps
        )
        if before is not None and figures.get("available"):
            opening = interval_opening(
                before.scraped_at,
                summary=event.get("summary"),
                start_at=start_at,
                warmed_at=warmed_at,
            )
            # Appended in IntervalOpening's order (what `figures |= opening` would store).
            figures["opened_after_warmup_s"] = opening["opened_after_warmup_s"]
            figures["opened_before_start_at_s"] = opening["opened_before_start_at_s"]
            figures["opened_before_first_request_s"] = opening["opened_before_first_request_s"]
            figures["interval_order_ok"] = opening["interval_order_ok"]
        try:
            await self.save(self.sweep_id, index, figures)
        except Exception:
            logger.warning("sweep %s: saving level %s server metrics failed", self.sweep_id, index)

    def _parse_boundary(
        self, event: BoundaryFields
    ) -> tuple[EngineMetrics | None, str, BoundaryScrape | None]:
        """The metrics the load generator scraped at a boundary, the problem if none, and the
        raw scrape (its time as the event gave it) to keep."""
        text, at = event.get("server_metrics_text"), event.get("server_metrics_t")
        if not isinstance(text, str) or not isinstance(at, int | float):
            problem = str(event.get("server_metrics_error") or "no /metrics scrape at a boundary")
            self.problems.append(problem)
            return None, problem, None
        try:
            return parse_engine_metrics(text, scraped_at=float(at)), "", {"t": at, "text": text}
        except MetricsParseError as exc:
            problem = f"/metrics: {exc}"
            self.problems.append(problem)
            return None, problem, None

    async def _scrape(self) -> tuple[EngineMetrics | None, str]:
        try:
            return await self.scrape(), ""
        except (httpx.HTTPError, MetricsParseError) as exc:
            problem = f"/metrics: {exc or type(exc).__name__}"
            self.problems.append(problem)
            return None, problem
