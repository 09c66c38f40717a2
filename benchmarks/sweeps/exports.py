"""Sweep results as files: level summaries as CSV or JSON, request records as JSON lines."""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TypedDict

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse

from benchlib.json_types import JsonObject
from benchlib.loadgen.recordstore import iter_jsonl_bytes
from benchmarks.sweeps import selectors
from benchmarks.sweeps.models import Sweep, SweepLevel
from benchmarks.sweeps.rows import LevelRow, SweepRow
from hosts.masking import masked_tree

# (column, path into the level summary); None paths are SweepLevel attributes.
CSV_COLUMNS: list[tuple[str, tuple[str, ...] | None]] = [
    ("index", None),
    ("concurrency", None),
    ("state", None),
    ("requests_ok", None),
    ("requests_failed", None),
    ("duration_s", ("duration_s",)),
    ("output_tokens", ("output_tokens",)),
    ("output_tok_s", ("output_tok_s",)),
    ("total_tok_s", ("total_tok_s",)),
    ("steady_output_tok_s", ("steady", "output_tok_s")),
    ("steady_duration_s", ("steady", "duration_s")),
    # Offered (open loop; a rate sweep's level) and achieved request rates, side by side.
    ("target_rate", ("target_rate",)),
    ("request_rate", ("request_rate",)),
    ("achieved_concurrency", ("achieved_concurrency",)),
    *(
        (f"{metric}_{q}_ms", (f"{metric}_ms", q))
        for metric in ("ttft", "tpot", "itl", "itl_chunk", "e2e")
        for q in ("p50", "p90", "p99")
    ),
    ("mean_tokens_per_chunk", ("mean_tokens_per_chunk",)),
    ("client_limited", ("client", "client_limited")),
    # Per-request acceptance where the engine reports it (the load generator's records).
    ("request_accept_length", ("acceptance", "accept_length")),
    ("request_acceptance_rate", ("acceptance", "acceptance_rate")),
    ("goodput_share", ("goodput", "share")),
    ("goodput_req_s", ("goodput", "goodput_req_s")),
    ("goodput_tok_s", ("goodput", "goodput_tok_s")),
    ("meets_slo", ("goodput", "meets_slo")),
    ("reason", None),
]
# Server-side figures for exactly the level (SweepLevel.server_metrics: /metrics differences).
SERVER_COLUMNS: list[tuple[str, str]] = [
    # Both speculative figures, each with its source (docs/measurement.md).
    ("server_accept_length", "accept_length"),
    ("server_accept_length_source", "accept_length_source"),
    ("server_tokens_per_step", "tokens_per_step"),
    ("server_tokens_per_step_source", "tokens_per_step_source"),
    ("server_acceptance_rate", "acceptance_rate"),
    ("server_acceptance_rate_source", "acceptance_rate_source"),
    ("server_spec_drafts", "spec_drafts"),
    ("server_spec_draft_tokens", "spec_draft_tokens"),
    ("server_spec_accepted_tokens", "spec_accepted_tokens"),
    ("server_generation_tokens", "generation_tokens"),
]


def _dig(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def level_row(level: SweepLevel) -> list[Any]:
    row: list[Any] = []
    for column, path in CSV_COLUMNS:
        value = getattr(level, column) if path is None else _dig(level.summary, path)
        row.append("" if value is None else value)
    server = level.server_metrics or {}
    for _, key in SERVER_COLUMNS:
        value = server.get(key)
        row.append("" if value is None else value)
    return row


def levels_csv(*, sweep: Sweep) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([column for column, _ in (*CSV_COLUMNS, *SERVER_COLUMNS)])
    for level in selectors.sweep_levels(sweep_id=sweep.pk):
        writer.writerow(level_row(level))
    return out.getvalue()


class ExportedSweep(SweepRow):
    """The sweep in its JSON export: its row, and what it was asked to do and where."""

    name: str
    target: JsonObject  # the environment's target (URL and model)
    load: JsonObject  # its load settings, as stored
    environment: JsonObject  # secrets masked
    notes: str
    tags: list[str]


class ExportedLevel(LevelRow):
    """A level in the JSON export: its row, its full summary and the server's figures."""

    summary: JsonObject
    server_metrics: JsonObject


class LevelsExport(TypedDict):
    """``levels_json``: the sweep's JSON export."""

    sweep: ExportedSweep
    levels: list[ExportedLevel]


def levels_json(*, sweep: Sweep) -> LevelsExport:
    levels = selectors.sweep_levels(sweep_id=sweep.pk)
    return {
        "sweep": {
            **selectors.sweep_as_dict(sweep),
            "name": str(sweep),
            "target": sweep.environment.get("target", {}),
            "load": sweep.load,
            "environment": masked_tree(sweep.environment),
            "notes": sweep.notes,
            "tags": sweep.tags,
        },
        "levels": [
            {
                **selectors.level_as_dict(level, sweep=sweep),
                "summary": level.summary,
                "server_metrics": level.server_metrics,
            }
            for level in levels
        ],
    }


def records_file(*, sweep: Sweep) -> Path | None:
    """The sweep's records file to serve, or None: only a regular file that resolves (links
    and ``..`` followed) to a place under the data directory, where the recorder writes it,
    so a path written into the row some other way never exposes another file."""
    if not sweep.records_path:
        return None
    root = Path(settings.SPECDASH_DATA_DIR).resolve()
    path = Path(sweep.records_path).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path


def iter_file(path: Path) -> Iterator[bytes]:
    """The records file as JSON lines: its bytes, or, for a compact file, lines made from its
    rows a block at a time while they are sent (never the whole file in memory)."""
    return iter_jsonl_bytes(path)


def _next_chunk(chunks: Iterator[bytes]) -> bytes:
    return next(chunks, b"")


async def aiter_file(path: Path) -> AsyncIterator[bytes]:
    # Reads (and a compact file's decoding) happen off the event loop; the file can be
    # hundreds of MB.
    chunks = iter_jsonl_bytes(path)
    try:
        while chunk := await asyncio.to_thread(_next_chunk, chunks):
            yield chunk
    finally:
        await asyncio.to_thread(chunks.close)


# The downloads as responses, built here once for the HTML views and the REST API alike, so
# both serve the same file under the same name.


def _attachment(response: HttpResponse | StreamingHttpResponse, filename: str) -> None:
    response["Content-Disposition"] = f'attachment; filename="{filename}"'


def levels_csv_response(*, sweep: Sweep) -> HttpResponse:
    response = HttpResponse(levels_csv(sweep=sweep), content_type="text/csv")
    _attachment(response, f"sweep-{sweep.pk}-levels.csv")
    return response


def levels_json_response(*, sweep: Sweep) -> HttpResponse:
    response = JsonResponse(levels_json(sweep=sweep), json_dumps_params={"indent": 1})
    _attachment(response, f"sweep-{sweep.pk}-levels.json")
    return response


def records_response(*, request: HttpRequest, sweep: Sweep) -> StreamingHttpResponse | None:
    """The records file streamed as JSON lines, or None while the sweep has none (each
    surface answers its own 404)."""
    path = records_file(sweep=sweep)
    if path is None:
        return None
    # Django serves async iterators under ASGI and sync ones under WSGI without a warning.
    content = aiter_file(path) if isinstance(request, ASGIRequest) else iter_file(path)
    response = StreamingHttpResponse(content, content_type="application/x-ndjson")
    _attachment(response, f"sweep-{sweep.pk}-records.jsonl")
    return response
