"""The typed shape of a level summary, the figures one level of load leaves behind.

``metrics.summarize_level`` builds it from the request records; the load generator prints it
as its ``level_summary`` event, the recorder stores it in ``SweepLevel.summary``, the audit
recomputes it, the exports and the pages read it. It travels as JSON, so these are
``TypedDict``s: the same plain dict at run time, one declared shape for mypy and the reader.
The keys of ``LevelSummary`` itself (not of its base) appear only when they apply: they are
declared with ``total=False`` rather than ``NotRequired``, which ``__required_keys__`` would not
see under postponed annotations.
"""

from __future__ import annotations

from typing import Any, TypedDict

from benchlib.loadgen.steady import SteadyFigures
from benchlib.stats.controller_types import ControllerFigures


class Distribution(TypedDict):
    count: int
    mean: float | None
    std: float | None
    min: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None


"""``metrics.distribution``: count, mean, population std, min, quantiles and max (None when
there are no values)."""


class RequestCounts(TypedDict):
    total: int
    ok: int
    failed: int
    errors_by_cause: dict[str, int]
    retried: int  # sent twice: the kept-alive connection closed before any response byte


class Estimated(TypedDict):
    chunk_tokens: int
    output_tokens: int
    any: bool


class PhaseAcceptance(TypedDict):
    """One reasoning phase's tokens per streamed chunk (``benchlib.loadgen.reasoning``): the
    client's reading of the accept length where the server sends a verify step's tokens in one
    chunk (docs/measurement.md, "Acceptance per phase"). ``tokens_per_chunk`` is ``tokens`` /
    ``chunks`` (None without chunks) over the ``requests`` that had exact per-chunk counts;
    ``tokens_per_delivery`` is ``tokens`` / ``deliveries``, the reading where a server sends a
    step's tokens as separate events arriving together (llama-server)."""

    tokens_per_chunk: float | None
    tokens_per_delivery: float | None
    tokens: int
    chunks: int
    deliveries: int
    requests: int


class ReasoningFigures(TypedDict):
    """A level's reasoning-phase figures (``benchlib.loadgen.reasoning.reasoning_figures``).

    ``accept_reasoning`` and ``accept_answer`` are absent from summaries stored before they
    were kept: read them with ``.get``."""

    requests: int
    answered: int
    reasoning_tokens: Distribution
    ttft_reasoning_ms: Distribution
    ttft_answer_ms: Distribution
    itl_reasoning_ms: Distribution
    itl_answer_ms: Distribution
    accept_reasoning: PhaseAcceptance
    accept_answer: PhaseAcceptance


class AcceptanceFigures(TypedDict):
    """Speculative acceptance over some requests (``benchlib.loadgen.acceptance``)."""

    requests: int
    output_tokens: int
    reporting: int  # requests whose engine reported their verify steps (or drafts)
    verify_steps: int
    draft_tokens: int
    accepted_tokens: int
    accept_length: float | None
    acceptance_rate: float | None


class LevelAcceptance(AcceptanceFigures):
    """A level summary's `acceptance`: the level's figures and each prompt category's."""

    # Each an AcceptanceFigures; declared loosely while a reader takes a `{}` default for a
    # category it lacks.
    by_category: dict[str, Any]


class LevelGoodput(TypedDict):
    """A level summary's `goodput` (`goodput_from_figures`). `p99` and `p99_failed` have a key
    per limit the SLO sets: the p99 over requests (None when it touches a failed request, which
    `p99_failed` then says)."""

    slo: dict[str, Any]  # Slo.to_dict
    requests: int
    met: int
    share: float | None
    goodput_req_s: float | None
    goodput_tok_s: float | None
    p99: dict[str, float | None]
    p99_failed: dict[str, bool]
    meets_slo: bool


class TurnFigures(TypedDict):
    """One turn index's row of a multi-turn level (``benchlib.loadgen.sessions.turn_figures``)."""

    turn: int  # 0: first
    requests: int
    ok: int
    prompt_tokens_mean: float | None  # from the server's usage
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None


class SessionFigures(TypedDict):
    """A multi-turn level's sessions (``benchlib.loadgen.sessions.session_figures``)."""

    sessions: int
    complete: int  # every turn succeeded
    turns: Distribution
    duration_s: Distribution
    later_over_first_ttft: Distribution


class RampSlice(TypedDict):
    """One time slice of a ramped level (``benchlib.loadgen.ramp.slice_figures``); times from
    the first arrival."""

    t0_s: float
    t1_s: float
    offered_rate: float
    arrivals: int
    arrival_rate: float | None
    ok: int
    output_tok_s: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None


class RampFigures(TypedDict):
    """A ramped level's summary block (``LevelSummary.ramp``): the ramp and its slices."""

    strategy: str
    start_rate: float
    end_rate: float
    slices: list[RampSlice]


class _Figures(TypedDict):
    """What every level summary has."""

    concurrency: int
    mode: str  # "closed" or "rate"
    partial: bool
    requests: RequestCounts
    duration_s: float
    output_tokens: int
    prompt_tokens: int
    output_tok_s: float | None
    total_tok_s: float | None
    request_rate: float | None
    achieved_concurrency: float | None
    steady: SteadyFigures
    ttft_ms: Distribution
    send_ms: Distribution
    ttft_after_send_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    itl_event_ms: Distribution
    itl_chunk_ms: Distribution
    itl_delivery_ms: Distribution
    e2e_ms: Distribution
    decode_tok_s: Distribution
    tokens_per_chunk: dict[str, int]
    mean_tokens_per_chunk: float | None
    mean_tokens_per_delivery: float | None
    estimated: Estimated
    acceptance: LevelAcceptance


class LevelSummary(_Figures, total=False):
    """A level summary: the figures, and what applies to this level."""

    window_wall: list[float]
    goodput: LevelGoodput
    # Added by whoever ran the level (the load generator's level_summary event, or the merge of
    # a split level's shards), not by summarize_level:
    level_index: int
    status: str  # completed, partial, failed, cancelled
    reason: str | None
    processes: int
    warmup_requests: int
    client: dict[str, Any]  # the client's own health (CPU, loop lag, warnings)
    anchor: dict[str, float]  # perf_counter -> wall-clock epoch
    split: dict[str, Any]  # per-shard rows of a level split over processes
    target_rate: float | None  # an open-loop level's request rate (req/s)
    burstiness: float | None  # its gamma shape (1: Poisson)
    # A ramped level (benchlib.loadgen.ramp): strategy, start and end rates, figures per slice.
    ramp: RampFigures
    # --controller-tracking (benchlib.stats.controller.controller_figures): the per-second
    # series and the switches with their cost; None when the server does not speculate.
    controller: ControllerFigures | None
    # Streams with a reasoning phase (benchlib.loadgen.reasoning): first-token times, token
    # gaps and tokens per chunk per phase.
    reasoning: ReasoningFigures
    # Multi-turn sessions (benchlib.loadgen.sessions): figures per turn index, and per session.
    turns: list[TurnFigures]
    sessions: SessionFigures
