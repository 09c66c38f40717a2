from __future__ import annotations

# The machine-readable event stream: one JSON object per line, flushed as it is written.
#
# Events: run_start, level_start, measure_start (after the level's warm-up, right before its first
# measured request: with --boundary-metrics-url it carries the level's opening /metrics scrape),
# sample (about once a second), level_summary, level_error, run_end.
# The dashboard reads them line by line from the subprocess's stdout (`--events -`). When that
# reader goes away (its process killed, the pipe's read end closed) the writer notices, on the next
# write or by polling the pipe, and calls `on_broken`: the CLI then cancels the run, so that a load
# generator never outlives the worker that was watching it.
import asyncio
import contextlib
import json
import math
import os
import select
import stat
from collections.abc import Callable
from typing import Any, TextIO

PIPE_POLL_S = 0.25


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
    def __init__(self, stream: TextIO | None, on_broken: Callable[[], None] | None = None) -> None:
        self.stream = stream
        self.on_broken = on_broken
        self.broken = False

    def emit(self, event: str, **fields: Any) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(dumps({"event": event, **fields}) + "\n")
            self.stream.flush()
        except (BrokenPipeError, ConnectionResetError, ValueError):
            self._broke()

    def _broke(self) -> None:
        # Stop writing; what is still buffered can never be delivered, so drop it rather than
        # let the interpreter's exit-time flush fail on it.
        self.stream = None
        if not self.broken:
            self.broken = True
            if self.on_broken is not None:
                self.on_broken()

    def close(self) -> None:
        if self.stream is not None:
            try:
                self.stream.flush()
            except (BrokenPipeError, ConnectionResetError, ValueError):
                self._broke()

    def _peer_gone(self) -> bool:
        stream = self.stream
        if stream is None:
            return False
        try:
            fd = stream.fileno()
            mode = os.fstat(fd).st_mode
        except (OSError, ValueError):
            return True  # closed under us
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            return False  # a file or a terminal: nobody can go away
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR and POLLHUP are always reported
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))

    async def watch(self, interval: float = PIPE_POLL_S) -> None:
        """Poll the stream for a vanished reader between writes (there may be none for long:
        the wait for --start-at, a long level with a slow sample interval)."""
        while self.stream is not None:
            if self._peer_gone():
                self._broke()
                return
            await asyncio.sleep(interval)


def silence_stdout() -> None:
    """Point fd 1 at /dev/null: after a broken pipe, the interpreter's own flush at exit would
    otherwise report the same error again (and exit 120)."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
