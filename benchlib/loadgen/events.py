from __future__ import annotations

# The machine-readable event stream: one JSON object per line, flushed as it is written.
#
# Every event is declared once below, as a TypedDict with an `event: Literal[...]` discriminator;
# `LoadgenEvent` is their union. The CLI emits them through `EventWriter.emit`, which takes only
# a `LoadgenEvent`, and every reader turns a line back into one with `parse_event`, which checks
# the discriminator and the required keys against the same declarations (their
# `__required_keys__` and type hints), so the writer and the readers cannot drift apart.
#
# Events: run_start, start_given (a start read on stdin), level_start, warmed_up (a member of a
# gang, after its warm-up), measure_start (after the level's warm-up, right before its first
# measured request: with --boundary-metrics-url it carries the level's opening /metrics
# scrape), sample (about once a second), level_summary, level_error, run_end.
# Required keys are those every reader relies on; the others the CLI writes whenever they
# apply, and readers take them with `.get`. The declarations use a required base and a
# `total=False` class rather than `NotRequired`, which `__required_keys__` does not see under
# postponed annotations (Python 3.11).
#
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
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TextIO, TypedDict

from benchlib.loadgen.summary import LevelSummary

PIPE_POLL_S = 0.25


class BoundaryFields(TypedDict, total=False):
    """The level's /metrics scrape at a boundary, taken by the load generator itself
    (`--boundary-metrics-url`): its text and time, or why there is none."""

    server_metrics_text: str
    server_metrics_t: float
    server_metrics_error: str


def boundary_fields(scrape: Mapping[str, Any]) -> BoundaryFields:
    """A boundary scrape (`cli_io.boundary_scrape`) as the events' fields, in its order."""
    fields = BoundaryFields()
    if "server_metrics_error" in scrape:
        fields["server_metrics_error"] = scrape["server_metrics_error"]
    if "server_metrics_text" in scrape:
        fields["server_metrics_text"] = scrape["server_metrics_text"]
        fields["server_metrics_t"] = scrape["server_metrics_t"]
    return fields


class _RunStart(TypedDict):
    event: Literal["run_start"]
    run_id: str


class RunStartEvent(_RunStart, total=False):
    t: float
    params: dict[str, object]  # every parsed flag (cli_args.run_params), echoed as given
    pid: int
    # With --start-at: the common start, and whether (and by how much) it had passed.
    start_at: float
    start_at_passed: bool
    start_at_late_s: float


class StartGivenEvent(TypedDict):
    """A start read on stdin (--start-at-stdin), as run_start would have said it."""

    event: Literal["start_given"]
    start_at: float
    start_at_passed: bool
    start_at_late_s: float


class LevelTrace(TypedDict):
    """What a level replays (cli_args.trace_event)."""

    file: str
    format: str
    speed: float
    start: float
    duration: float | None
    requests: int
    rate: float  # mean arrivals per second over the trace (0 for one request)


class _LevelStart(TypedDict):
    event: Literal["level_start"]
    level_index: int
    concurrency: int


class LevelStartEvent(_LevelStart, total=False):
    t: float
    requests: int | None
    duration: float | None
    warmup_requests: int
    request_rate: float | None
    burstiness: float
    processes: int
    trace: LevelTrace


class _WarmedUp(TypedDict):
    event: Literal["warmed_up"]
    level_index: int


class WarmedUpEvent(_WarmedUp, total=False):
    t: float


class _MeasureStart(TypedDict):
    event: Literal["measure_start"]
    level_index: int


class MeasureStartEvent(_MeasureStart, BoundaryFields, total=False):
    concurrency: int
    warmed_at: float
    t: float
    # Set by the coordinator of a split level, which opens the level's interval itself: the
    # shards' common start (benchmarks.sweeps.distributed).
    start_at: float


class _Sample(TypedDict):
    event: Literal["sample"]
    level_index: int


class SampleFigures(TypedDict, total=False):
    """A live sample's figures, declared once: the sample event carries them, and so does the
    sweep page's live sample (``benchmarks.sweeps.rows.LiveSample``) that stores and charts it."""

    concurrency: int
    phase: str
    tok_s: float | None  # null when the interval was empty (JSON has no NaN)
    in_flight: int
    completed: int
    errors: int
    ttft_p50: float | None
    loop_lag_ms: float | None
    client_cpu: float | None
    client_limited: bool
    processes: int  # a level split across processes in one load generator (multiproc)


class SampleEvent(_Sample, SampleFigures, total=False):
    t: float


class _LevelSummary(TypedDict):
    event: Literal["level_summary"]
    level_index: int


class LevelSummaryEvent(_LevelSummary, BoundaryFields, total=False):
    summary: LevelSummary
    # Set by the coordinator of a split level: the end of its shards' warm-up (the latest).
    warmed_at: float | None


class _LevelError(TypedDict):
    event: Literal["level_error"]
    level_index: int
    reason: str | None


class LevelErrorEvent(_LevelError, total=False):
    detail: str  # the traceback's tail, when the level could not run at all


class _RunEnd(TypedDict):
    event: Literal["run_end"]
    status: str  # completed, cancelled or failed


class RunEndEvent(_RunEnd, total=False):
    reason: str | None
    t: float
    levels: int


LoadgenEvent = (
    RunStartEvent
    | StartGivenEvent
    | LevelStartEvent
    | WarmedUpEvent
    | MeasureStartEvent
    | SampleEvent
    | LevelSummaryEvent
    | LevelErrorEvent
    | RunEndEvent
)


class MalformedEvent(ValueError):
    """A line that is not one of the declared events (reported with the line's start)."""


def _declarations() -> dict[str, tuple[type, dict[str, object]]]:
    """Each event's discriminator -> its TypedDict and type hints, read off the union."""
    table: dict[str, tuple[type, dict[str, object]]] = {}
    for cls in typing.get_args(LoadgenEvent):
        hints = typing.get_type_hints(cls)
        (name,) = typing.get_args(hints["event"])
        if name in table:  # two declarations for one event: the parser could take only one
            raise TypeError(f"{cls.__name__} and {table[name][0].__name__} are both {name!r}")
        table[name] = (cls, hints)
    return table


def _scalar_types(hint: object) -> tuple[type, ...] | None:
    """The plain JSON types a hint allows (int also for float), or None when the hint is not
    a plain scalar (a nested object, a Literal), whose shape is not checked here."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    allowed: list[type] = []
    for option in options:
        if option is type(None):
            allowed.append(type(None))
        elif option is float:
            allowed += [float, int]
        elif option in (int, str, bool):
            allowed.append(option)
        else:
            return None
    return tuple(allowed)


def _matches(value: object, allowed: tuple[type, ...]) -> bool:
    # JSON's true is a Python int too: a bool stands for a number only where bool is allowed.
    if isinstance(value, bool) and bool not in allowed:
        return False
    return isinstance(value, allowed)


_DECLARED = _declarations()


def check_event(obj: object) -> LoadgenEvent:
    """An already-decoded JSON value as a `LoadgenEvent`: a known discriminator, every
    required key present, and the plain scalar required keys of the declared type."""
    if not isinstance(obj, dict):
        raise MalformedEvent(f"an event is a JSON object, not {type(obj).__name__}")
    kind = obj.get("event")
    if not isinstance(kind, str) or kind not in _DECLARED:
        known = ", ".join(sorted(_DECLARED))
        raise MalformedEvent(f"unknown event {kind!r} (the load generator's events: {known})")
    cls, hints = _DECLARED[kind]
    missing = sorted(k for k in getattr(cls, "__required_keys__", ()) if k not in obj)
    if missing:
        raise MalformedEvent(f"{kind} event without {', '.join(missing)}")
    for key in sorted(getattr(cls, "__required_keys__", ())):
        allowed = _scalar_types(hints[key])
        if allowed is not None and not _matches(obj[key], allowed):
            want = " or ".join(t.__name__ for t in allowed)
            raise MalformedEvent(f"{kind} event's {key} is {obj[key]!r}, not {want}")
    return typing.cast(LoadgenEvent, obj)


def parse_event(line: str) -> LoadgenEvent:
    """One line of the stream as its event; MalformedEvent saying what is wrong otherwise."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise MalformedEvent(f"not a JSON line ({exc}): {line[:200]!r}") from None
    try:
        return check_event(obj)
    except MalformedEvent as exc:
        raise MalformedEvent(f"{exc}: {line.strip()[:200]!r}") from None


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

    def emit(self, event: LoadgenEvent) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(dumps(event) + "\n")
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
