from __future__ import annotations

# Per-request records and the clock anchor that ties perf_counter() times to wall time.
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NotRequired, TypedDict


@dataclass(frozen=True, slots=True)
class ClockAnchor:
    """A (wall, perf) pair read at the same instant.

    Records keep `time.perf_counter()` times; `to_wall` turns them into `time.time()` epoch seconds,
    the clock of a server's truth log, and `shift_to` rebases them onto another process's anchor.
    """

    t0_wall: float
    t0_perf: float

    @classmethod
    def now(cls) -> ClockAnchor:
        # Bracket time.time() between two perf_counter() reads and keep the tightest of a few tries,
        # so the pair is accurate to well under a microsecond.
        best: tuple[float, float, float] | None = None
        for _ in range(5):
            p1 = time.perf_counter()
            w = time.time()
            p2 = time.perf_counter()
            if best is None or p2 - p1 < best[0]:
                best = (p2 - p1, w, (p1 + p2) / 2)
        assert best is not None
        return cls(t0_wall=best[1], t0_perf=best[2])

    def to_wall(self, t_perf: float) -> float:
        return self.t0_wall + (t_perf - self.t0_perf)

    def to_perf(self, t_wall: float) -> float:
        return self.t0_perf + (t_wall - self.t0_wall)

    def shift_to(self, other: ClockAnchor) -> float:
        """The amount to add to this anchor's perf times to express them on `other`'s perf clock."""
        # Differences of like clocks first: epoch seconds (~1.7e9) have a 0.24 us resolution, and
        # subtracting two nearby wall times is exact where wall - perf would round.
        return (self.t0_wall - other.t0_wall) - (self.t0_perf - other.t0_perf)

    def to_dict(self) -> dict[str, float]:
        return {"t0_wall": self.t0_wall, "t0_perf": self.t0_perf}


class RecordRow(TypedDict):
    """A record's JSON form (`RequestRecord.to_json`): one line of records.jsonl, one row of a
    compact records file. Times are wall-clock epoch seconds rounded to 1 us; the keys after
    `finish` appear only when they apply."""

    level: int
    id: str
    slot: int
    proc: int
    start: float
    end: float
    first_token: float | None
    chunks: list[list[float]]  # [arrival time, output tokens] per chunk
    out: int
    prompt: int | None
    finish: str | None
    sent: NotRequired[float]
    written: NotRequired[float]
    warmup: NotRequired[bool]
    out_est: NotRequired[bool]
    chunk_est: NotRequired[bool]
    error_kind: NotRequired[str]
    error: NotRequired[str | None]
    retries: NotRequired[int]
    cat: NotRequired[str]
    spec_steps: NotRequired[int]
    spec_drafted: NotRequired[int]
    spec_accepted: NotRequired[int]
    scheduled: NotRequired[float]
    reasoning: NotRequired[int]
    first_answer: NotRequired[float]
    session: NotRequired[int]
    turn: NotRequired[int | None]
    # The attempt of the level that wrote the row (recordstore.RecordTarget, the CLI's
    # --attempt), when the level was run again.
    attempt: NotRequired[int]


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request. Times are perf_counter() seconds on the level's anchor.

    `chunk_times[i]` is when the read holding chunk i arrived and `chunk_tokens[i]` the number of
    output tokens it carried (a difference of the server's cumulative usage; 1 per chunk when the
    server gives no per-chunk usage, flagged by `chunk_tokens_estimated`). Chunks that carry no
    token (role-only deltas, usage-only tails) are not listed.

    `start` is when the request was handed to httpx; `sent` when httpcore began writing it on a
    connection (pool and locks passed) and `written` when its body was written: start -> written
    is the client's own send path, which a busy event loop stretches.
    """

    request_id: str
    slot: int = 0
    process: int = 0
    warmup: bool = False
    start: float = 0.0
    end: float = 0.0
    sent: float | None = None
    written: float | None = None
    first_token: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int | None = None
    output_tokens_estimated: bool = False
    chunk_tokens_estimated: bool = False
    finish_reason: str | None = None
    error_kind: str | None = None
    error: str | None = None
    # Times the request was sent again because the kept-alive connection it went out on had
    # been closed by the server before any byte of a response (see client.send_request).
    retries: int = 0

    # The prompt's category (chat, code, synthetic, ...) and, where the engine reports them for
    # this request, its speculative figures: verify steps, drafted and accepted draft tokens.
    category: str | None = None
    spec_steps: int | None = None
    spec_drafted: int | None = None
    spec_accepted: int | None = None
    # When a replayed trace had this request arrive (perf_counter), to compare with `start`.
    scheduled: float | None = None
    # A reasoning stream (reasoning deltas before the answer): the arrival of the first chunk
    # carrying answer text, and the output tokens before it (None: no reasoning was streamed).
    first_answer: float | None = None
    reasoning_tokens: int | None = None
    # A multi-turn session's request: the session (unique in its level) and the turn (0: first).
    session: int | None = None
    turn: int | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def shifted(self, delta: float) -> RequestRecord:
        """A copy with every time moved by `delta` seconds."""

        def moved(t: float | None) -> float | None:
            return None if t is None else t + delta

        return replace(
            self,
            start=self.start + delta,
            end=self.end + delta,
            sent=moved(self.sent),
            written=moved(self.written),
            first_token=moved(self.first_token),
            chunk_times=[t + delta for t in self.chunk_times],
            chunk_tokens=list(self.chunk_tokens),
            scheduled=moved(self.scheduled),
            first_answer=moved(self.first_answer),
        )

    def to_json(self, anchor: ClockAnchor, *, level_index: int) -> RecordRow:
        """A compact JSON form with wall-clock (epoch) times, comparable with a truth log."""
        w = anchor.t0_wall - anchor.t0_perf
        d: RecordRow = {
            "level": level_index,
            "id": self.request_id,
            "slot": self.slot,
            "proc": self.process,
            "start": round(self.start + w, 6),
            "end": round(self.end + w, 6),
            "first_token": None if self.first_token is None else round(self.first_token + w, 6),
            "chunks": [
                [round(t + w, 6), n]
                for t, n in zip(self.chunk_times, self.chunk_tokens, strict=True)
            ],
            "out": self.output_tokens,
            "prompt": self.prompt_tokens,
            "finish": self.finish_reason,
        }
        if self.sent is not None:
            d["sent"] = round(self.sent + w, 6)
        if self.written is not None:
            d["written"] = round(self.written + w, 6)
        if self.warmup:
            d["warmup"] = True
        if self.output_tokens_estimated:
            d["out_est"] = True
        if self.chunk_tokens_estimated:
            d["chunk_est"] = True
        if self.error_kind is not None:
            d["error_kind"] = self.error_kind
            d["error"] = self.error
        if self.retries:
            d["retries"] = self.retries

        if self.category is not None:
            d["cat"] = self.category
        if self.spec_steps is not None:
            d["spec_steps"] = self.spec_steps
        if self.spec_drafted is not None:
            d["spec_drafted"] = self.spec_drafted
        if self.spec_accepted is not None:
            d["spec_accepted"] = self.spec_accepted
        if self.scheduled is not None:
            d["scheduled"] = round(self.scheduled + w, 6)
        if self.reasoning_tokens is not None:
            d["reasoning"] = self.reasoning_tokens
            if self.first_answer is not None:
                d["first_answer"] = round(self.first_answer + w, 6)
        if self.session is not None:
            d["session"] = self.session
            d["turn"] = self.turn
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any], anchor: ClockAnchor) -> RequestRecord:
        """Inverse of `to_json` (to within the 1 us rounding), onto `anchor`'s perf clock.

        `d` is a `RecordRow`, or a row read back from a file or a stored field before anything
        checked its shape; a row missing a required key raises KeyError."""
        p = anchor.t0_perf - anchor.t0_wall
        chunks = d.get("chunks") or []
        ft = d.get("first_token")
        sent, written = d.get("sent"), d.get("written")
        return cls(
            request_id=d["id"],
            slot=d.get("slot", 0),
            process=d.get("proc", 0),
            warmup=d.get("warmup", False),
            start=d["start"] + p,
            end=d["end"] + p,
            sent=None if sent is None else sent + p,
            written=None if written is None else written + p,
            first_token=None if ft is None else ft + p,
            chunk_times=[c[0] + p for c in chunks],
            chunk_tokens=[c[1] for c in chunks],
            output_tokens=d.get("out", 0),
            prompt_tokens=d.get("prompt"),
            output_tokens_estimated=d.get("out_est", False),
            chunk_tokens_estimated=d.get("chunk_est", False),
            finish_reason=d.get("finish"),
            error_kind=d.get("error_kind"),
            error=d.get("error"),
            retries=d.get("retries", 0),
            category=d.get("cat"),
            spec_steps=d.get("spec_steps"),
            spec_drafted=d.get("spec_drafted"),
            spec_accepted=d.get("spec_accepted"),
            scheduled=None if d.get("scheduled") is None else d["scheduled"] + p,
            first_answer=None if d.get("first_answer") is None else d["first_answer"] + p,
            reasoning_tokens=d.get("reasoning"),
            session=d.get("session"),
            turn=d.get("turn"),
        )


class SparseColumn(TypedDict):
    """A key only some of a block's rows have: those rows' indices and their values."""

    rows: list[int]
    values: list[Any]


# A compact block's other columns (recordstore.py: every key but the start, the times and the
# chunks), by key: each row's value, or a sparse column where some rows lack the key.
OtherColumns = dict[str, list[Any] | SparseColumn]

# The JSON form's time fields besides `start` and the chunks, in its key order.
TimeKey = Literal["end", "first_token", "sent", "written"]
TIME_KEYS: tuple[TimeKey, ...] = ("end", "first_token", "sent", "written")


class BlockTimes(TypedDict, total=False):
    """A compact block's time columns (us from each row's start, None where the row lacks the
    field): those that some row of the block has."""

    end: list[int | None]
    first_token: list[int | None]
    sent: list[int | None]
    written: list[int | None]


class BlockHead(BlockTimes):
    """A compact block's columns (recordstore.py), the JSON at its head: the row count, each
    row's start (us, delta-coded from the previous row's), the time columns, each row's chunk
    count and the other columns. The chunks themselves follow the head as binary arrays."""

    n: int
    start: list[int]
    nchunks: list[int]
    other: OtherColumns
