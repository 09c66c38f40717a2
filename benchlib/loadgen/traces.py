from __future__ import annotations

# Trace replay: recorded arrival times with input and output lengths, read from files the
# operator names (nothing is fetched), and prompts synthesised to those lengths.
#
# Formats (docs/measurement.md, "Workloads"):
# - "mooncake": JSON lines of {"timestamp": ms, "input_length": n, "output_length": n,
#   "hash_ids": [...]}, the FAST'25 Mooncake traces that SGLang's bench_serving replays. Each
#   hash id names one block of MOONCAKE_BLOCK_TOKENS input tokens; two requests that list the
#   same hash id share that block of their prompt (a prefix the server can cache).
# - "burstgpt": the BurstGPT CSV (columns Timestamp in seconds, Model, Request tokens, Response
#   tokens, Total tokens, Log Type). Rows with 0 response tokens are failed requests in that
#   trace and are skipped, as vLLM's BurstGPT loader skips them.
# - "jsonl": ours, JSON lines of {"t": seconds, "input_tokens": n, "output_tokens": n} with an
#   optional "hash_ids" list in mooncake's sense (blocks of "block_tokens", default 512).
import csv
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from benchlib.json_types import JsonObject
from benchlib.loadgen.prompts import _WORDS, Prompt

TRACE_FORMATS = ("mooncake", "burstgpt", "jsonl")
# Mooncake's traces hash the prompt in blocks of 512 tokens (its README; SGLang's loader
# uses the same block size to rebuild prompts).
MOONCAKE_BLOCK_TOKENS = 512
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


class TraceError(ValueError):
    """A trace file that cannot be read: the message names the file and line."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One recorded request: its arrival in seconds after the trace's first one."""

    offset: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    requests: tuple[TraceRequest, ...]
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def replayed(
        self, *, speed: float = 1.0, start: float = 0.0, duration: float | None = None
    ) -> Trace:
        """The requests that arrived in [start, start + duration) of the trace, their offsets
        made relative to `start` and divided by `speed` (2: twice as fast)."""
        if speed <= 0:
            raise ValueError("trace speed must be above 0")
        end = None if duration is None else start + duration
        kept = tuple(
            TraceRequest((r.offset - start) / speed, r.input_tokens, r.output_tokens, r.hash_ids)
            for r in self.requests
            if r.offset >= start and (end is None or r.offset < end)
        )
        if not kept:
            raise TraceError("the trace window holds no requests")
        return Trace(kept, self.block_tokens)

    @property
    def span(self) -> float:
        return self.requests[-1].offset if self.requests else 0.0

    def rate(self) -> float:
        """Mean arrivals per second over the trace's span (0 for a single request)."""
        return (len(self.requests) - 1) / self.span if self.span > 0 else 0.0


def _positive_int(value: Any, what: str, where: str, *, zero: bool = False) -> int:
    if isinstance(value, bool):
        raise TraceError(f"{where}: {what} must be a whole number")
    try:
        number = int(float(value))
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {what} must be a whole number, not {value!r}") from None
    if number < (0 if zero else 1) or number != float(value):
        raise TraceError(f"{where}: {what} must be a whole number above 0, not {value!r}")
    return number


def _time(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TraceError(f"{where}: the arrival time must be a number")
    try:
        t = float(value)
    except ValueError:
        raise TraceError(f"{where}: the arrival time must be a number, not {value!r}") from None
    if not t >= 0 or t == float("inf"):
        raise TraceError(f"{where}: the arrival time must be a finite number >= 0")
    return t


def _hashes(value: Any, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in value
    ):
        raise TraceError(f"{where}: hash_ids must be a list of integers")
    return tuple(value)


def _json_lines(path: Path) -> Iterable[tuple[str, JsonObject]]:
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path.name}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{where}: not JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{where}: expected a JSON object")
            yield where, obj


def _ordered(
    requests: list[TraceRequest], path: Path, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> Trace:
    """Sorted by arrival and made relative to the first (traces start at any epoch)."""
    if not requests:
        raise TraceError(f"{path.name}: no requests")
    requests.sort(key=lambda r: r.offset)
    t0 = requests[0].offset
    return Trace(
        tuple(
            TraceRequest(r.offset - t0, r.input_tokens, r.output_tokens, r.hash_ids)
            for r in requests
        ),
        block_tokens,
    )


def load_mooncake(path: Path) -> Trace:
    requests = []
    for where, obj in _json_lines(path):
        requests.append(
            TraceRequest(
                _time(obj.get("timestamp"), where) / 1000.0,
                _positive_int(obj.get("input_length"), "input_length", where),
                _positive_int(obj.get("output_length"), "output_length", where),
                _hashes(obj.get("hash_ids"), where),
            )
        )
    return _ordered(requests, path)


def load_burstgpt(path: Path) -> Trace:
    requests = []
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in BURSTGPT_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceError(f"{path.name}: no column(s) {', '.join(missing)} (BurstGPT's CSV)")
        for lineno, row in enumerate(reader, 2):
            where = f"{path.name}:{lineno}"
            out = _positive_int(row["Response tokens"], "Response tokens", where, zero=True)
            if out == 0:
                continue  # a failed request in BurstGPT
            requests.append(
                TraceRequest(
                    _time(row["Timestamp"], where),
                    _positive_int(row["Request tokens"], "Request tokens", where),
                    out,
                )
            )
    return _ordered(requests, path)


def load_simple(path: Path) -> Trace:
    requests = []
    block_tokens = MOONCAKE_BLOCK_TOKENS
    for where, obj in _json_lines(path):
        if "block_tokens" in obj:
            block_tokens = _positive_int(obj["block_tokens"], "block_tokens", where)
        requests.append(
            TraceRequest(
                _time(obj.get("t"), where),
                _positive_int(obj.get("input_tokens"), "input_tokens", where),
                _positive_int(obj.get("output_tokens"), "output_tokens", where),
                _hashes(obj.get("hash_ids"), where),
            )
        )
    return _ordered(requests, path, block_tokens)


def detect_trace_format(path: Path) -> str:
    """Which of TRACE_FORMATS a file is, from its first non-blank line: a JSON object with
    Mooncake's `timestamp` and `input_length`, one with our `t` and `input_tokens`, or a CSV
    header with BurstGPT's columns. Raises TraceError naming what it found otherwise (or
    OSError; a file that is not UTF-8 text is a TraceError too)."""
    try:
        with path.open(encoding="utf-8") as f:
            first = next((line.strip() for line in f if line.strip()), "")
    except UnicodeDecodeError:
        raise TraceError(f"{path.name}: not UTF-8 text") from None
    if not first:
        raise TraceError(f"{path.name}: empty")
    if first.startswith("{"):
        try:
            obj = json.loads(first)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path.name}:1: not JSON ({exc.msg})") from None
        if isinstance(obj, dict) and {"timestamp", "input_length"} <= obj.keys():
            return "mooncake"
        if isinstance(obj, dict) and {"t", "input_tokens"} <= obj.keys():
            return "jsonl"
        keys = ", ".join(sorted(obj)) if isinstance(obj, dict) else "not an object"
        raise TraceError(
            f"{path.name}:1: a JSON line with neither Mooncake's timestamp and input_length "
            f"nor t and input_tokens (found: {keys})"
        )
    header = next(csv.reader([first]))
    if all(c in header for c in BURSTGPT_COLUMNS):
        return "burstgpt"
    raise TraceError(
        f"{path.name}:1: neither JSON lines nor a CSV header with BurstGPT's columns "
        f"({', '.join(BURSTGPT_COLUMNS)})"
    )


def load_trace(path: Path, fmt: str) -> Trace:
    """A trace file in one of TRACE_FORMATS. Raises TraceError (or OSError)."""
    if fmt == "mooncake":
        return load_mooncake(path)
    if fmt == "burstgpt":
        return load_burstgpt(path)
    if fmt == "jsonl":
        return load_simple(path)
    raise TraceError(f"unknown trace format {fmt!r} (known: {', '.join(TRACE_FORMATS)})")


@lru_cache(maxsize=4096)
def _block_words(seed: int, hash_id: int, n: int) -> tuple[str, ...]:
    # Cached: a shared block (a system prompt) is built once, not once per request.
    return tuple(random.Random(f"{seed}:block:{hash_id}").choices(_WORDS, k=n))


@dataclass(frozen=True, slots=True)
class TracePrompts:
    """The trace's request i as a prompt of its recorded input length (one common word per
    token, as SyntheticPrompts) asking for its recorded output length. Where the trace gives
    hash ids, block j of the prompt is the words of hash id j, so requests that share a hash
    id share that block and every block before it that they also share: the prefix a server's
    cache can reuse. Tokens past the listed blocks are the request's own."""

    trace: Trace
    seed: int = 0

    def get(self, index: int) -> Prompt:
        req = self.trace.requests[index % len(self.trace.requests)]
        return Prompt(
            " ".join(prompt_words(req, self.trace.block_tokens, self.seed, index)),
            req.output_tokens,
            "trace",
        )


def prompt_words(req: TraceRequest, block_tokens: int, seed: int, index: int) -> list[str]:
    words: list[str] = []
    for hash_id in req.hash_ids:
        if len(words) >= req.input_tokens:
            break
        take = min(block_tokens, req.input_tokens - len(words))
        words += _block_words(seed, hash_id, block_tokens)[:take]
    rest = req.input_tokens - len(words)
    if rest > 0:
        words += random.Random(f"{seed}:own:{index}").choices(_WORDS, k=rest)
    return words
