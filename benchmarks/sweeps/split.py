"""What one split level is made of: each shard's share and argv, and the exact merge of
what the shards measured into one level summary (``benchmarks.sweeps.distributed`` runs
them). The merge is ``summarize_level`` over the union of the shards' records, never an
average of their summaries; each shard's own figures say which fell behind and why.

The merge streams: each shard's records file is copied into the sweep's a batch at a time,
and the summaries are computed in passes that read the shards' files again
(``summarize_level_passes``), so its memory is a batch and the token samples' arrays, not the
level's records."""

from __future__ import annotations

import contextlib
import itertools
import math
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from benchlib.json_types import JsonObject
from benchlib.loadgen.goodput import Slo
from benchlib.loadgen.merge import merge_client_health
from benchlib.loadgen.metrics import RecordSource, summarize_level_passes
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.recordstore import RecordWriter, iter_rows
from benchlib.loadgen.summary import LevelSummary
from benchmarks.sweeps.runner import loadgen_argv

# A shard "fell behind" when it started this much later than the common start...
LATE_START_S = 0.25
# ...kept fewer than this share of its streams in flight, or served its streams at less
# than this fraction of the best shard's per-stream throughput.
MIN_CONCURRENCY_RATIO = 0.9
MIN_STREAM_RATE_RATIO = 0.8
_STATUS_RANK = {"completed": 0, "cancelled": 1, "failed": 2}


def shard_count(concurrency: int, *, streams: int, requests: int | None = None) -> int:
    """How many processes a level of ``concurrency`` runs as (each keeps at least one stream
    and, with a request count, at least one request)."""
    if streams <= 0 or concurrency <= streams:
        return 1
    n = math.ceil(concurrency / streams)
    return max(1, min(n, concurrency, requests if requests else n))


@dataclass
class Shard:
    """One shard's share of a level and what it reported."""

    index: int
    concurrency: int
    requests: int | None
    records_path: Path
    anchor: ClockAnchor | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    # Its load generator's events as read (benchmarks.sweeps.distributed).
    run_start: JsonObject = field(default_factory=dict)
    run_end: JsonObject = field(default_factory=dict)
    exit_code: int | None = None
    last_sample: JsonObject | None = None
    worker_id: str = ""  # the job worker that ran it, when shards run as jobs
    warmed_at: float | None = None  # when its warm-up was over (its measure_start event)


@dataclass(frozen=True)
class ShardLevel:
    """A shard's measured records on its own perf clock, with its anchor: the input of the
    exact merge. ``records`` is a list, or a source that reads them again on each call (the
    shard's records file)."""

    index: int
    concurrency: int
    anchor: ClockAnchor
    records: Sequence[RequestRecord] | RecordSource
    status: str = "completed"
    reason: str | None = None
    client: JsonObject = field(default_factory=dict)  # its summary's client health
    start_at: float | None = None
    worker_id: str = ""

    def source(self) -> RecordSource:
        records = self.records
        if callable(records):
            return records
        return lambda: records


class ShardFigures(TypedDict):
    """One shard's row in a split level's ``split.shards``: its share, its own figures and,
    once every shard is in, why it fell behind (empty when it did not)."""

    index: int
    concurrency: int
    status: str
    requests_ok: int
    requests_failed: int
    output_tok_s: float | None
    per_stream_tok_s: float | None
    achieved_concurrency: float | None
    start_lag_s: float | None  # after the common start, to its first measured request
    client_limited: bool
    worker: str
    behind: NotRequired[list[str]]


def _shard_figures(part: ShardLevel, mode: str) -> ShardFigures:
    source = part.source()
    own = summarize_level_passes(
        source, concurrency=part.concurrency, mode=mode, anchor=part.anchor
    )
    first = min((r.start for r in source() if not r.warmup), default=None)
    lag = (
        max(0.0, part.anchor.to_wall(first) - part.start_at)
        if first is not None and part.start_at is not None
        else None
    )
    tok_s = own["output_tok_s"]
    return {
        "index": part.index,
        "concurrency": part.concurrency,
        "status": part.status,
        "requests_ok": own["requests"]["ok"],
        "requests_failed": own["requests"]["failed"],
        "output_tok_s": tok_s,
        "per_stream_tok_s": tok_s / part.concurrency if tok_s is not None else None,
        "achieved_concurrency": own["achieved_concurrency"],
        "start_lag_s": lag,
        "client_limited": bool(part.client.get("client_limited")),
        "worker": part.worker_id or "coordinator",
    }


def _behind(row: ShardFigures, best_rate: float | None) -> list[str]:
    why = []
    if row["status"] != "completed":
        why.append(f"ended {row['status']}")
    if row["start_lag_s"] is not None and row["start_lag_s"] > LATE_START_S:
        why.append(f"started {row['start_lag_s']:.2f}s late")
    if row["client_limited"]:
        why.append("client-limited")
    achieved = row["achieved_concurrency"]
    if achieved is not None and achieved < MIN_CONCURRENCY_RATIO * row["concurrency"]:
        why.append(f"kept {achieved:.1f} of {row['concurrency']} streams in flight")
    rate = row["per_stream_tok_s"]
    if rate is not None and best_rate and rate < MIN_STREAM_RATE_RATIO * best_rate:
        why.append(f"{rate:.1f} tok/s per stream vs {best_rate:.1f} for the best shard")
    return why


def start_skew(rows: Sequence[ShardFigures]) -> float | None:
    """Between the first and the last shard to send its first measured request: how far
    apart the shards of a level really began (None with fewer than two that began)."""
    lags = [lag for r in rows if (lag := r.get("start_lag_s")) is not None]
    return max(lags) - min(lags) if len(lags) >= 2 else None


def merge_shard_levels(
    parts: Sequence[ShardLevel],
    *,
    level_index: int,
    mode: str = "closed",
    slo: Slo | None = None,
) -> LevelSummary:
    """The level summary of a split level: ``summarize_level`` over the union of every
    shard's records (rebased onto the first shard's clock), plus ``split``: each shard's
    share and figures, and which shards fell behind and why."""
    if not parts:
        raise ValueError("nothing to merge")
    anchor = parts[0].anchor
    worst = max(parts, key=lambda p: _STATUS_RANK.get(p.status, 2))
    concurrency = sum(p.concurrency for p in parts)
    shifts = [(p.source(), p.anchor.shift_to(anchor)) for p in parts]

    def union() -> Iterator[RequestRecord]:
        # Rebased exactly as merge.merge_records does; the summary does not depend on order.
        return itertools.chain.from_iterable(
            (r.shifted(delta) if delta else r for r in source()) for source, delta in shifts
        )

    summary = summarize_level_passes(
        union,
        concurrency=concurrency,
        mode=mode,
        partial=worst.status != "completed",
        anchor=anchor,
        slo=slo,  # goodput over the union, like every other figure
    )
    rows = [_shard_figures(p, mode) for p in parts]
    rates = [r["per_stream_tok_s"] for r in rows if r["per_stream_tok_s"] is not None]
    best = max(rates) if rates else None
    for row in rows:
        row["behind"] = _behind(row, best)
    client = merge_client_health([p.client for p in parts if p.client.get("loop_lag_ms")])
    client.setdefault("warnings", [])
    client["warnings"] += [
        f"shard {r['index']} fell behind: {'; '.join(r['behind'])}" for r in rows if r["behind"]
    ]
    client["client_limited"] = any(r["client_limited"] for r in rows)
    summary["level_index"] = level_index
    summary["status"] = worst.status
    summary["reason"] = worst.reason
    summary["processes"] = len(parts)
    summary["client"] = client
    summary["anchor"] = anchor.to_dict()
    summary["split"] = {
        "shards": rows,
        "behind": [r["index"] for r in rows if r["behind"]],
        "median_per_stream_tok_s": statistics.median(rates) if rates else None,
        "start_skew_s": start_skew(rows),
    }
    return summary


def read_shard_records(
    shard: Shard, *, level_index: int, sweep_records: Path, attempt: int | None = None
) -> RecordSource:
    """A shard's measured records (its records carry wall-clock times) on its anchor, read
    from its file on each call; its rows are first appended, a batch at a time, to the sweep's
    records file (in that file's format) under the sweep's level index, so the export holds
    the union exactly as a one-process sweep's does."""
    anchor = shard.anchor
    assert anchor is not None
    tags: dict[str, int] = {"level": level_index}
    if attempt is not None:
        tags["attempt"] = attempt
    union = RecordWriter(sweep_records, append=True)
    try:
        with contextlib.suppress(FileNotFoundError):
            for data in iter_rows(shard.records_path):
                union.write({**data, **tags})
    finally:
        union.close()
    path = shard.records_path

    def read() -> Iterator[RequestRecord]:
        with contextlib.suppress(FileNotFoundError):
            for data in iter_rows(path):
                record = RequestRecord.from_json(data, anchor)
                if not record.warmup:
                    yield record

    return read


def _figure(sample: JsonObject, key: str) -> float | None:
    # A sample's figures are numbers or null (the load generator writes no other kind).
    value = sample.get(key)
    return value if isinstance(value, int | float) else None


def combine_samples(samples: Sequence[JsonObject], *, concurrency: int) -> JsonObject:
    """One live sample (``benchmarks.sweeps.rows.LiveSample``, as the load generator's sample
    event) from the shards' latest ones: counts add up; latency and client figures are the
    worst shard's (live percentiles cannot be merged, the summary is exact)."""
    first = samples[0]
    out = {k: v for k, v in first.items() if k not in {"event"}}
    for key in ("tok_s", "in_flight", "completed", "errors"):
        out[key] = sum(_figure(s, key) or 0 for s in samples)
    for key in ("ttft_p50", "loop_lag_ms", "client_cpu"):
        values = [v for s in samples if (v := _figure(s, key)) is not None]
        out[key] = max(values) if values else None
    out["client_limited"] = any(s.get("client_limited") for s in samples)
    out["t"] = max(float(_figure(s, "t") or 0.0) for s in samples)
    out["concurrency"] = concurrency
    out["shards"] = len(samples)
    return out


def shard_argv(
    *,
    base_url: str,
    model: str,
    load: dict[str, Any],
    shard: Shard,
    start_at: float | None,
    run_id: str,
    engine: str = "",
) -> list[str]:
    share_load = dict(load)
    if shard.requests is not None:
        share_load["requests_per_level"] = shard.requests
    if shard.index:
        # The server's per-second figures are the server's, not a shard's: one scrape is enough.
        share_load["controller_tracking"] = False
    argv = loadgen_argv(
        base_url=base_url,
        model=model,
        levels=[shard.concurrency],
        load=share_load,
        records_path=shard.records_path,
        engine=engine,
    )
    # Distinct run ids keep request ids apart; distinct seeds keep the prompts apart. Without
    # a start (a gang-started shard job), the shard is given it once its gang is ready.
    start = ["--start-at", repr(start_at)] if start_at is not None else []
    return [
        *argv,
        *start,
        "--run-id",
        f"{run_id}-p{shard.index}",
        "--seed",
        str(shard.index),
    ]
