from __future__ import annotations

# The machine-readable event stream: one JSON object per line, flushed as it is written.
#
# Events: run_start, level_start, sample (about once a second), level_summary, level_error, run_end.
# The dashboard reads them line by line from the subprocess's stdout (`--events -`).
import contextlib
import json
import math
from typing import Any, TextIO


def _clean(value: Any) -> Any:
    # JSON has no NaN or infinity: write null rather than an unparseable line.
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def dumps(obj: Any) -> str:
    return json.dumps(_clean(obj), separators=(",", ":"))


class EventWriter:
    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream

    def emit(self, event: str, **fields: Any) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(dumps({"event": event, **fields}) + "\n")
            self.stream.flush()
        except (BrokenPipeError, ValueError):
            self.stream = None  # the reader went away: keep running, stop writing

    def close(self) -> None:
        if self.stream is not None:
            with contextlib.suppress(BrokenPipeError, ValueError):
                self.stream.flush()
