"""Trace files a sweep can replay: the ones in the trace folder (``SPECDASH_TRACE_DIR``), and
an upload that puts a checked one there.

An upload is refused unless the user may run sweeps (the operators' role: a trace is a sweep's
input). It is written to a hidden part file in the folder while its size is counted against
``SPECDASH_TRACE_MAX_BYTES``, its format is detected from its first line
(``benchlib.loadgen.traces.detect_trace_format``) and every line is read by that format's
loader, so a file the load generator would refuse is refused here with the loader's message
(its file and line). Only then is it renamed into place, atomically: a trace already there
under that name is never replaced by different bytes (the upload is refused, naming it), and
the same bytes again are accepted as they are. Nothing fetched, nothing half-written left.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError

from benchlib.loadgen.traces import TraceError, detect_trace_format, load_trace
from core import roles

# A plain file name (no folder, no leading dot: the part files are hidden ones) with one of
# the suffixes the formats use.
TRACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,119}\.(jsonl|json|csv)$")
_PART_PREFIX = ".upload-"


class TraceRow(TypedDict):
    """``TraceFile.as_dict``: a trace as the API and the trace page list it."""

    name: str
    format: str
    size: int
    requests: int | None
    rate: float | None
    span_s: float | None


@dataclass(frozen=True)
class TraceFile:
    """A trace in the folder. Its requests, mean rate and span are known where it was read
    whole (an upload); a listing detects the format from the first line only."""

    name: str
    format: str
    size: int
    requests: int | None = None
    rate: float | None = None
    span_s: float | None = None

    def as_dict(self) -> TraceRow:
        return TraceRow(
            name=self.name,
            format=self.format,
            size=self.size,
            requests=self.requests,
            rate=self.rate,
            span_s=self.span_s,
        )


def _folder() -> Path:
    return Path(settings.SPECDASH_TRACE_DIR)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def trace_check(path: Path, *, name: str | None = None) -> TraceFile:
    """The trace at ``path`` read whole by its detected format; a ValidationError naming
    ``trace`` with the loader's message (file and line) when it is not one."""
    shown = name or path.name
    try:
        fmt = detect_trace_format(path)
        trace = load_trace(path, fmt)
    except (TraceError, UnicodeDecodeError) as exc:
        text = str(exc).replace(path.name, shown) if isinstance(exc, TraceError) else ""
        raise ValidationError({"trace": [text or f"{shown}: not UTF-8 text"]}) from None
    return TraceFile(
        name=shown,
        format=fmt,
        requests=len(trace.requests),
        rate=trace.rate(),
        span_s=trace.span,
        size=path.stat().st_size,
    )


def trace_upload(*, user: Any, name: str, chunks: Iterable[bytes]) -> TraceFile:
    """Check and store one trace file under ``name`` in the trace folder (see the module's
    notes); ``chunks`` its bytes. PermissionDenied without the role to run sweeps;
    ValidationError naming ``name`` (bad name, a different file there already), ``file``
    (too large, empty) or ``trace`` (not a trace in a known format)."""
    if not roles.can_run_sweeps(user):
        raise PermissionDenied
    if not TRACE_NAME.match(name or ""):
        raise ValidationError(
            {
                "name": [
                    "A plain file name ending in .jsonl, .json or .csv (letters, digits, . _ -)."
                ]
            }
        )
    limit = int(settings.SPECDASH_TRACE_MAX_BYTES)
    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True)
    part = folder / f"{_PART_PREFIX}{secrets.token_hex(8)}.part"
    try:
        size = 0
        with part.open("xb") as out:
            for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    said = f"Larger than the limit of {limit:,} bytes (SPECDASH_TRACE_MAX_BYTES)."
                    raise ValidationError({"file": [said]})
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if size == 0:
            raise ValidationError({"file": ["The file is empty."]})
        found = trace_check(part, name=name)
        target = folder / name
        if target.exists():
            if _sha256(target) != _sha256(part):
                said = f"A different trace named {name!r} is there already: choose another name."
                raise ValidationError({"name": [said]})
        else:
            # Atomic within the folder: a reader sees the whole file or none.
            os.replace(part, target)
        return found
    finally:
        with contextlib.suppress(FileNotFoundError):
            part.unlink()


def trace_list() -> list[TraceFile]:
    """The traces in the folder a sweep can name, by name, with the format detected from each
    one's first line (a file in no known format is left out: a sweep naming it would fail)."""
    folder = _folder()
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.iterdir()):
        if not path.is_file() or not TRACE_NAME.match(path.name):
            continue
        try:
            found.append(TraceFile(path.name, detect_trace_format(path), path.stat().st_size))
        except (TraceError, OSError):
            continue
    return found


def trace_format_of(name: str) -> str | None:
    """The detected format of the trace ``name`` in the folder (None: not a readable trace)."""
    try:
        return detect_trace_format(_folder() / name)
    except (TraceError, OSError):
        return None
