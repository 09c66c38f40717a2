"""The load generator as a child process: its argv, its event lines, and stopping it."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from django.conf import settings as django_settings

from benchlib.json_types import JsonObject
from benchlib.loadgen import events as loadgen_events
from benchlib.loadgen.apis import Api, engine_extra_body
from benchlib.loadgen.events import LoadgenEvent
from benchlib.loadgen.settings import LoadSettings

logger = logging.getLogger(__name__)

# A level summary is one line of a few KB; the limit only guards against a runaway line.
LINE_LIMIT = 16 * 1024 * 1024
STDERR_TAIL_LINES = 40


def loadgen_argv(
    *,
    base_url: str,
    model: str,
    levels: list[int],
    load: dict[str, Any],
    records_path: Path,
    level_index_base: int = 0,
    attempt: int | None = None,
    append_records: bool = False,
    python: str = sys.executable,
    metrics_url: str | None = None,
    engine: str = "",
) -> list[str]:
    """The command line of one sweep's load generator (an argv list: no shell anywhere).

    The load flags are the settings' own (``LoadSettings.to_argv``). A sweep's own process
    appends to the sweep's records file and numbers its levels as the sweep does
    (``level_index_base``), with the sweep's attempt in every record, so a resumed run
    writes beside the levels already measured and never over them.

    ``engine`` (the profile's engine) adds the body fields that make the server report each
    request's speculative figures; a user's ``load["extra_body"]`` is merged over them."""
    # The model is the caller's (the sweep's target, or "" to ask the server).
    settings = LoadSettings.from_stored(load).model_copy(update={"model": model})
    argv = [
        python,
        "-m",
        "benchlib.loadgen",
        "--base-url",
        base_url,
        "--concurrency",
        ",".join(str(c) for c in levels),
        *settings.to_argv(),
    ]
    if settings.trace:
        # The sweep's trace is a name in the dashboard's trace folder (checked when cleaned).
        argv += ["--trace-dir", str(django_settings.SPECDASH_TRACE_DIR)]
    extra_body = request_extra_body(engine, load)
    if extra_body:
        argv += ["--extra-body", json.dumps(extra_body, sort_keys=True)]
    if metrics_url:
        # The load generator scrapes right before each level's first request (the level's
        # server-side interval must include its opening burst).
        argv += ["--boundary-metrics-url", metrics_url]
    argv += ["--events", "-", "--records", str(records_path), "--quiet"]
    if append_records:
        argv.append("--records-append")
    if level_index_base:
        argv += ["--level-index-base", str(level_index_base)]
    if attempt is not None:
        argv += ["--attempt", str(attempt)]
    return argv


def request_extra_body(engine: str, load: dict[str, Any]) -> JsonObject:
    """The engine's speculative-figures fields, then the user's extra body (its fields win)."""
    try:
        api = Api(str(load.get("api") or "completions"))
    except ValueError:
        api = Api.COMPLETIONS
    user = load.get("extra_body")
    return {**engine_extra_body(engine, api), **(user if isinstance(user, dict) else {})}


def parse_event(line: bytes) -> LoadgenEvent | None:
    """One event line as its event (``benchlib.loadgen.events.parse_event``); None (and a
    warning saying what is wrong) for anything else, such as a traceback on stdout."""
    text = line.strip()
    if not text:
        return None
    try:
        return loadgen_events.parse_event(text.decode("utf-8"))
    except (UnicodeDecodeError, loadgen_events.MalformedEvent) as exc:
        logger.warning("load generator wrote a line that is not one of its events: %s", exc)
        return None


def _pidfd_of(pid: int) -> int | None:
    """A pidfd for a child just started (Linux 5.3+); None where there is none, or where the
    child has already exited and been reaped (signals are then moot)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


class LoadgenProcess:
    """A running load generator: ``events()`` yields its event lines as events. The one
    process of a sweep and each local shard (a ``supervisor.LevelSource``)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        self.terminated = False
        self._pidfd = _pidfd_of(process.pid)

    @classmethod
    async def start(
        cls, argv: list[str], *, cwd: Path | None = None, stdin_pipe: bool = False
    ) -> LoadgenProcess:
        """``stdin_pipe``: keep its stdin open for ``send_line`` (``--start-at-stdin``)."""
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin_pipe else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            limit=LINE_LIMIT,
        )
        return cls(process)

    @property
    def pid(self) -> int:
        return self.process.pid

    async def send_line(self, text: str | None) -> None:
        """A line on its stdin, then end of input (None: end of input only)."""
        stdin = self.process.stdin
        if stdin is None:
            return
        with contextlib.suppress(ConnectionError):
            if text is not None:
                stdin.write(f"{text}\n".encode())
                await stdin.drain()
            stdin.close()

    async def _drain_stderr(self) -> None:
        # Read stderr continuously: a full pipe would block the child.
        stream = self.process.stderr
        assert stream is not None
        while line := await stream.readline():
            self.stderr_tail.append(line.decode("utf-8", "replace").rstrip())

    async def events(self) -> AsyncIterator[LoadgenEvent]:
        stream = self.process.stdout
        assert stream is not None
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # a line over LINE_LIMIT: skip what is buffered, go on
                logger.warning("load generator line over %d bytes skipped", LINE_LIMIT)
                continue
            if not line:
                return
            event = parse_event(line)
            if event is not None:
                yield event

    def terminate(self) -> None:
        """SIGTERM: the load generator cancels, reports the partial level and run_end."""
        self.terminated = True
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        # Through a pidfd, not the process object: Popen.send_signal first polls, and a poll
        # that reaps a child which has just exited (asyncio's watcher thread not yet run, as
        # on a busy machine) leaves that thread nothing to wait for: it then reports exit
        # code 255 for a clean exit. A pidfd names this process only, exited or not, and
        # reaps nothing; a process already reaped is a ProcessLookupError.
        if self.process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            if self._pidfd is None:
                self.process.send_signal(sig)
            else:
                signal.pidfd_send_signal(self._pidfd, sig)

    async def wait(self, seconds: float | None = None) -> int | None:
        """The exit code, or None if it is still running after ``seconds``."""
        try:
            code = await asyncio.wait_for(self.process.wait(), timeout=seconds)
        except TimeoutError:
            return None
        self._close_pidfd()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), timeout=2)
        return code

    async def stop(self, *, grace: float) -> int:
        """Terminate, wait up to ``grace`` seconds, then kill. Returns the exit code."""
        self.terminate()
        code = await self.wait(grace)
        if code is None:
            logger.warning("load generator %s ignored SIGTERM for %.0fs: killing", self.pid, grace)
            self.kill()
            code = await self.process.wait()
            self._close_pidfd()
        return code

    def __del__(self) -> None:
        self._close_pidfd()

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    async def ended(self, *, wait: float, grace: float) -> int:
        """The exit code: up to ``wait`` seconds for it to exit on its own, then ``stop``."""
        code = await self.wait(wait) if wait > 0 else None
        return code if code is not None else await self.stop(grace=grace)

    def stderr_text(self) -> str:
        return "\n".join(self.stderr_tail)
