"""Traces: the files a sweep's ``load.trace`` can name, and an upload that stores a checked one.

The upload takes the file's text in a JSON body, so its size is bounded by the API's body
limit (``DATA_UPLOAD_MAX_MEMORY_SIZE``, 413 over it) as well as ``SPECDASH_TRACE_MAX_BYTES``;
the Traces page takes larger files as a multipart upload. The checks are the service's
(benchmarks.sweeps.traces): role, name, size, format detected and every line read, never over a
different file.
"""

from __future__ import annotations

from typing import Annotated

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.responses import Status
from pydantic import StringConstraints

from benchmarks.sweeps import traces
from benchmarks.sweeps.traces import TraceRow
from specdash.api.auth import caller, requires, sweeper, viewer
from specdash.api.common import WRITE_ERRORS, responses
from specdash.api.schemas.base import In

router = Router(tags=["traces"])


class TraceOut(Schema):
    name: str = Field(description="The file name a sweep's load.trace names")
    format: str = Field(description="mooncake, burstgpt or jsonl (detected from the file)")
    size: int = Field(description="Bytes")
    requests: int | None = Field(None, description="Requests read (an upload only)")
    rate: float | None = Field(None, description="Mean req/s over its span (an upload only)")
    span_s: float | None = Field(None, description="First to last arrival, s (an upload only)")


class TraceIn(In):
    name: Annotated[str, StringConstraints(min_length=1, max_length=124)] = Field(
        description="A plain file name ending in .jsonl, .json or .csv"
    )
    content: str = Field(description="The file's text (UTF-8), as it is to be stored")


@router.get("/traces", response=responses({200: list[TraceOut]}), summary="List traces")
@requires(viewer)
def trace_list(request: HttpRequest) -> list[TraceRow]:
    """The traces in the dashboard's trace folder, with each one's detected format."""
    return [t.as_dict() for t in traces.trace_list()]


@router.post("/traces", response=responses({201: TraceOut}, WRITE_ERRORS), summary="Upload a trace")
@requires(sweeper)
def trace_upload(request: HttpRequest, payload: TraceIn) -> Status[TraceRow]:
    """Store a trace file in the trace folder once every line reads in its detected format;
    201 with its format, requests and rate. 422 naming `name` (not a plain trace file name, or
    a different file stored under it), `file` (empty, or over SPECDASH_TRACE_MAX_BYTES) or
    `trace` (not a trace: the loader's message with the line at fault)."""
    user = caller(request)
    stored = traces.trace_upload(user=user, name=payload.name, chunks=[payload.content.encode()])
    return Status(201, stored.as_dict())
