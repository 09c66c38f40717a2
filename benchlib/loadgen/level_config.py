"""What one level of load is asked to do (``LevelConfig``, the plan of levels, each process's
share) and what it gives back (``LevelResult``).

Apart from the runner (``level.py``) because most readers need only these: the CLI plans
levels, the multi-process driver splits them, the merge and the summary read results, and
none of them runs a level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchlib.json_types import JsonObject
from benchlib.loadgen.apis import Api
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.traces import Trace

if TYPE_CHECKING:
    from benchlib.loadgen.settings import LoadSettings


@dataclass(frozen=True, slots=True)
class LevelConfig:
    """Everything one level (or one process's share of it) needs."""

    api: Api
    base_url: str
    model: str
    concurrency: int
    level_index: int = 0
    num_requests: int | None = None
    duration: float | None = None
    warmup_requests: int = 0
    request_rate: float | None = None
    # Gamma-distributed gaps between arrivals with this shape (1: Poisson; below 1 burstier, above
    # more regular), scale 1 / (rate * burstiness) so the mean rate stays `request_rate`.
    burstiness: float = 1.0
    # None: the dataset's length, else level_requests.DEFAULT_MAX_TOKENS
    max_tokens: int | None = None
    ignore_eos: bool = False
    temperature: float | None = None
    extra_body: JsonObject | None = None  # a user's fields merged into each request body
    request_timeout: float = 600.0
    seed: int = 0
    drain_seconds: float = 0.0
    on_server_error: str = "stop"  # or "continue"
    max_consecutive_connect_errors: int = 10
    max_error_ratio: float = 0.5
    min_requests_for_ratio: int = 20
    sample_interval: float = 1.0
    run_id: str = "run"
    # a share of a level split across processes: this process issues indices p, p+P, p+2P...
    process_index: int = 0
    process_count: int = 1
    slot_offset: int = 0
    # A replayed trace (already windowed and scaled): request k arrives at the measured phase's
    # start + trace.requests[k].offset and is built from the trace's prompt k (the prompt source
    # is then a TracePrompts over the same trace); the concurrency caps in-flight as with a rate.
    trace: Trace | None = None
    # A ramp within the level (benchlib.loadgen.ramp): the rate rises from ramp_start_rate to
    # request_rate over the level's requests (or its duration).
    ramp: str = ""
    ramp_start_rate: float | None = None
    # Multi-turn sessions (benchlib.loadgen.sessions): each closed-loop worker runs sessions of
    # this many turns, one after another, history carried, `think_time` between turns.
    session_turns: int = 0
    turn_tokens: int = 32
    think_time: float = 0.0

    @property
    def mode(self) -> str:
        # A trace is open-loop arrivals too: its steady window is the arrival window.
        return "rate" if self.request_rate or self.trace is not None else "closed"

    @classmethod
    def from_settings(
        cls,
        settings: LoadSettings,
        *,
        base_url: str,
        concurrency: int,
        request_rate: float | None,
        **run: Any,
    ) -> LevelConfig:
        """One level of a run with these load settings (``run``: the rest, such as the
        level's index, the seed and the server-error policy). A max_tokens not given leaves
        the output length to the dataset."""
        return cls(
            api=Api(settings.api),
            base_url=base_url,
            model=settings.model,
            concurrency=concurrency,
            num_requests=settings.requests_per_level,
            duration=settings.duration,
            warmup_requests=settings.warmup_requests,
            request_rate=request_rate,
            burstiness=settings.burstiness,
            max_tokens=settings.max_tokens if "max_tokens" in settings.model_fields_set else None,
            ignore_eos=settings.ignore_eos,
            temperature=settings.temperature,
            request_timeout=settings.request_timeout,
            ramp=settings.ramp,
            ramp_start_rate=settings.ramp_start_rate,
            session_turns=settings.session_turns,
            turn_tokens=settings.turn_tokens,
            think_time=settings.think_time,
            **run,
        )


@dataclass(slots=True)
class LevelResult:
    level_index: int
    concurrency: int
    mode: str
    anchor: ClockAnchor
    records: list[RequestRecord] = field(default_factory=list)
    warmup_records: list[RequestRecord] = field(default_factory=list)
    status: str = "completed"  # "completed" | "cancelled" | "failed"
    reason: str | None = None
    client: dict[str, Any] = field(default_factory=dict)
    # With a record sink the records went there as they completed and the lists above stay
    # empty; these count them either way.
    measured_count: int = 0
    warmup_count: int = 0

    @property
    def partial(self) -> bool:
        return self.status != "completed"


def level_plan(
    concurrency: Sequence[int], rates: Sequence[float] | None
) -> list[tuple[int, float | None]]:
    """(concurrency, rate) per level, from the CLI's --concurrency and --request-rate (and a
    sweep's levels and request rates). One rate applies to every concurrency level; several
    rates with one concurrency make a rate sweep capped at that concurrency; else the lists
    pair up."""
    if not rates:
        return [(c, None) for c in concurrency]
    if len(rates) == 1:
        return [(c, rates[0]) for c in concurrency]
    if len(concurrency) == 1:
        return [(concurrency[0], r) for r in rates]
    if len(rates) != len(concurrency):
        raise ValueError("give one request rate, one concurrency, or as many rates as levels")
    return list(zip(concurrency, rates, strict=True))


def share(total: int | None, index: int, count: int) -> int | None:
    """This process's part of `total` (the first `total % count` processes take one more)."""
    if total is None:
        return None
    return total // count + (1 if index < total % count else 0)
