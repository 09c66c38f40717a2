from __future__ import annotations

# What the load generator's CLI reads and writes besides its event stream: the records and
# results files, the start given on stdin, the wait for a wall-clock start, the boundary
# /metrics scrapes, and its progress lines.
import asyncio
import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from benchlib.loadgen.events import BoundaryFields
from benchlib.loadgen.level import RecordSink, RunnerSample
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.recordstore import (
    COMPACT_SUFFIX,
    FLUSH_INTERVAL_S,
    RecordTarget,
    RecordWriter,
    iter_rows,
)


class LevelRecords:
    """Where the run's records go as requests complete, and how a level's are read back.

    Rows are appended to --records a batch at a time (recordstore.RecordWriter). The level's
    summary is computed afterwards from what was written, read back from where the level began,
    so the process holds a batch of records, never a level. Without --records, or when it is
    not a regular file (/dev/null, a FIFO), the rows also go to a compact spool file in the
    temporary directory, removed at the end, which is what gets read back.
    """

    def __init__(self, path: Path | None, *, append: bool, attempt: int | None) -> None:
        self.attempt = attempt
        self.writers: list[RecordWriter] = []
        self._spool: Path | None = None
        if path is not None:
            self.writers.append(RecordWriter(path, append=append))
        if not self.writers or not self.writers[0].readable:
            fd, name = tempfile.mkstemp(prefix="loadgen-records-", suffix=COMPACT_SUFFIX)
            os.close(fd)
            self._spool = Path(name)
            self.writers.append(RecordWriter(self._spool, append=False, compact=True))
        self._read = self.writers[-1]
        self._level_prefix = ""
        self._level_offset = 0

    def sink(self, *, run_id: str, level_index: int) -> RecordSink:
        """The level's record sink; it also marks where the level's rows begin."""
        self.flush()
        self._level_offset = self._read.offset()
        self._level_prefix = f"{run_id}-{level_index}-"
        attempt = self.attempt

        def write(rec: RequestRecord, anchor: ClockAnchor) -> None:
            row = rec.to_json(anchor, level_index=level_index)
            if attempt is not None:
                row["attempt"] = attempt
            for writer in self.writers:
                writer.write(row)

        return write

    def target(self) -> RecordTarget:
        """The files, for a split level's worker processes to append to themselves."""
        return RecordTarget(
            files=tuple((str(w.path), w.compact) for w in self.writers), attempt=self.attempt
        )

    def level_source(self, anchor: ClockAnchor) -> Callable[[], Iterator[RequestRecord]]:
        """The level's records as written (another writer may append to the same file: only
        this run's rows of this level count), readable again for each pass of the summary."""
        path, offset, prefix = self._read.path, self._level_offset, self._level_prefix
        attempt = self.attempt

        def read() -> Iterator[RequestRecord]:
            for row in iter_rows(path, offset=offset):
                if str(row.get("id", "")).startswith(prefix) and row.get("attempt") == attempt:
                    yield RequestRecord.from_json(row, anchor)

        return read

    def flush(self) -> None:
        for writer in self.writers:
            writer.flush()

    async def flush_periodically(self) -> None:
        """Rows wait at most FLUSH_INTERVAL_S for their batch to reach the disk, even when no
        request completes for a while."""
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S / 2)
            for writer in self.writers:
                writer.flush_if_due()

    def close(self) -> None:
        try:
            for writer in self.writers:
                writer.close()
        finally:
            if self._spool is not None:
                self._spool.unlink(missing_ok=True)


async def boundary_scrape(url: str) -> BoundaryFields:
    """The server's /metrics text just before a level starts, with the time it answered.

    Taken here, in the process that sends the requests, and awaited before the first one:
    a scrape by whoever reads the events would land after the level's opening burst."""
    import httpx  # the CLI's other paths do not need it loaded

    limits = httpx.Limits(max_keepalive_connections=0)  # no connection outlives the scrape
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0), limits=limits) as client:
            response = await client.get(url)
            response.raise_for_status()
    except httpx.HTTPError as exc:
        return BoundaryFields(server_metrics_error=f"/metrics: {exc or type(exc).__name__}")
    return BoundaryFields(server_metrics_text=response.text, server_metrics_t=time.time())


def write_output(path: Path, text: str) -> None:
    """Write atomically (a reader never sees half a file), except onto something that is not
    a regular file (/dev/null, a FIFO): renaming onto /dev/null would replace the device."""
    if path.exists() and not path.is_file():
        path.write_text(text, encoding="utf-8")
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


async def stdin_line(cancel: asyncio.Event) -> str:
    """One line from stdin, or "" on a cancel or end of input. Read in a daemon thread: a
    blocked read must not keep a cancelled process from exiting."""
    loop = asyncio.get_running_loop()
    got: asyncio.Future[str] = loop.create_future()

    def deliver(line: str) -> None:
        if not got.done():
            got.set_result(line)

    def read() -> None:
        line = sys.stdin.readline()
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(deliver, line)

    threading.Thread(target=read, name="start-at-stdin", daemon=True).start()
    waiter: asyncio.Future[Any] = asyncio.ensure_future(cancel.wait())
    pending: set[asyncio.Future[Any]] = {got, waiter}
    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    return got.result() if got.done() else ""


async def sleep_until(wall: float, cancel: asyncio.Event) -> None:
    """Sleep until the wall-clock time `wall`, or until cancelled.

    Slept in steps of at most a second and re-read from time.time() each step, so that a wall clock
    stepped by NTP while waiting still gives the intended instant (the point is that processes on
    several machines start together by their synchronised clocks).
    """
    while not cancel.is_set():
        left = wall - time.time()
        if left <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(cancel.wait(), timeout=min(left, 1.0))


def _fmt(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def summary_line(s: Mapping[str, Any]) -> str:
    req = s["requests"]
    return (
        f"== level {s['level_index']} C={s['concurrency']} {s['status']}: "
        f"ok={req['ok']} failed={req['failed']} out_tok/s={_fmt(s['output_tok_s'], '.1f')} "
        f"steady={_fmt(s['steady']['output_tok_s'], '.1f')} "
        f"ttft_p50={_fmt(s['ttft_ms']['p50'], '.1f')}ms "
        f"itl_p50={_fmt(s['itl_ms']['p50'], '.2f')}ms "
        f"conc={_fmt(s['achieved_concurrency'], '.2f')}"
        + (" CLIENT-LIMITED" if s["client"].get("client_limited") else "")
    )


def progress_line(level: int, concurrency: int, s: RunnerSample) -> str:
    ttft = s["ttft_p50"]
    ttft_txt = f"{ttft * 1e3:.0f}ms" if ttft is not None else "-"
    warn = " CLIENT-LIMITED" if s["client_limited"] else ""
    return (
        f"[level {level} C={concurrency} {s['phase']}] tok/s={s['tok_s']:.0f} "
        f"in_flight={s['in_flight']} done={s['completed']} err={s['errors']} "
        f"ttft_p50={ttft_txt} lag={s['loop_lag_ms']:.1f}ms cpu={s['client_cpu']:.0f}%{warn}"
    )
