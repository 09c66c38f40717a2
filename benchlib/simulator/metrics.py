from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from .scheduler import SchedulerCore

# vLLM-style histogram bounds.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    60.0,
)
ITL_BUCKETS = (
    0.001,
    0.002,
    0.004,
    0.006,
    0.008,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.04,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.0,
)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)

# SGLang's default bounds, used when the server is started without `--bucket-time-to-first-token`
# and friends (srt/metrics/collector.py). Its TTFT buckets start at 0.1 s: every TTFT below
# 100 ms lands in the first bucket, so a quantile there is an interpolation, not a measurement.
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1.000,
    2.000,
    4.000,
    6.000,
    8.000,
)
SGLANG_E2E_BUCKETS = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800,
    2400,
)  # fmt: skip


class Histogram:
    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float, weight: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += weight
        self.total += value * weight
        self.count += weight


@dataclass
class Window:
    """Counter snapshot for the gauges that SGLang computes over its last logging interval."""

    at: float = 0.0
    generated: int = 0
    request_steps: int = 0
    accepted: int = 0
    draft_tokens: int = 0


@dataclass
class EngineMetrics:
    model: str
    style: str
    ranks: int
    ttft: Histogram = field(init=False)
    itl: Histogram = field(init=False)
    e2e: Histogram = field(init=False)
    finished_by_reason: dict[str, int] = field(default_factory=dict)
    gen_throughput: float = 0.0
    accept_length: float = 0.0
    accept_rate: float = 0.0
    _window: Window = field(default_factory=Window)
    # SGLang adds to its token and request counters when a request finishes
    # (srt/managers/scheduler_metrics_mixin.py, 0.5.23), not per step: these are those.
    finished_prompt_tokens: int = 0
    finished_generation_tokens: int = 0
    finished_requests: int = 0
    finished_verify_calls: int = 0

    def __post_init__(self) -> None:
        sglang = self.style != "vllm"
        self.ttft = Histogram(SGLANG_TTFT_BUCKETS if sglang else TTFT_BUCKETS)
        self.itl = Histogram(SGLANG_ITL_BUCKETS if sglang else ITL_BUCKETS)
        self.e2e = Histogram(SGLANG_E2E_BUCKETS if sglang else E2E_BUCKETS)

    def observe_request(
        self,
        arrival: float,
        chunks: Sequence[Sequence[float]],
        finish: float,
        reason: str,
        *,
        prompt_tokens: int = 0,
        generated: int = 0,
        verify_steps: int = 0,
    ) -> None:
        self.finished_by_reason[reason] = self.finished_by_reason.get(reason, 0) + 1
        self.finished_prompt_tokens += prompt_tokens
        self.finished_generation_tokens += generated
        self.finished_requests += 1
        self.finished_verify_calls += verify_steps
        self.e2e.observe(finish - arrival)
        if not chunks:
            return
        self.ttft.observe(chunks[0][0] - arrival)
        last = chunks[0][0]
        for t, n in chunks[1:]:
            if self.style == "vllm":
                # vLLM: one sample per engine output, whatever its token count
                # (vllm/v1/metrics/stats.py): per verify step under speculation.
                self.itl.observe(t - last)
            else:
                # SGLang: token-level; a chunk of n tokens counts n gaps of (chunk gap / n).
                tokens = int(n)
                self.itl.observe((t - last) / tokens, tokens)
            last = t

    def tick(self, core: SchedulerCore, now: float) -> None:
        w = self._window
        elapsed = now - w.at
        if w.at and elapsed > 0:
            self.gen_throughput = (core.generated_tokens - w.generated) / elapsed
            steps = core.request_steps - w.request_steps
            drafts = core.spec_draft_tokens - w.draft_tokens
            if steps and core.speculative:
                self.accept_length = (core.generated_tokens - w.generated) / steps
                self.accept_rate = (core.spec_accepted - w.accepted) / drafts if drafts else 0.0
        self._window = Window(
            now,
            core.generated_tokens,
            core.request_steps,
            core.spec_accepted,
            core.spec_draft_tokens,
        )

    def render(self, core: SchedulerCore) -> bytes:
        if self.style == "vllm":
            return _render_vllm(self, core)
        return _render_sglang(self, core)


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: dict[str, str], value: float) -> None:
        inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
        self.lines.append(f"{name}{{{inner}}} {float(value)!r}")

    def gauge(self, name: str, help_text: str, series: list[tuple[dict[str, str], float]]) -> None:
        self.family(name, "gauge", help_text)
        for labels, value in series:
            self.sample(name, labels, value)

    def counter(self, name: str, help_text: str, labels: dict[str, str], value: float) -> None:
        self.family(name, "counter", help_text)
        self.sample(name, labels, value)

    def histogram(self, name: str, help_text: str, labels: dict[str, str], h: Histogram) -> None:
        self.family(name, "histogram", help_text)
        cumulative = 0
        for bound, count in zip(h.bounds, h.counts, strict=False):
            cumulative += count
            self.sample(f"{name}_bucket", {**labels, "le": repr(float(bound))}, cumulative)
        self.sample(f"{name}_bucket", {**labels, "le": "+Inf"}, h.count)
        self.sample(f"{name}_count", labels, h.count)
        self.sample(f"{name}_sum", labels, h.total)

    def text(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode()


def _render_sglang(m: EngineMetrics, core: SchedulerCore) -> bytes:
    w = _Writer()
    base = {"model_name": m.model}
    ranks = [{**base, "tp_rank": str(r), "dp_rank": "0"} for r in range(m.ranks)]
    usage = core.kv_used / core.profile.kv_tokens

    def per_rank(value: float) -> list[tuple[dict[str, str], float]]:
        return [(labels, value) for labels in ranks]

    w.gauge(
        "sglang:num_running_reqs", "The number of running requests.", per_rank(len(core.running))
    )
    w.gauge(
        "sglang:num_queue_reqs",
        "The number of requests in the waiting queue.",
        per_rank(len(core.queue)),
    )
    w.gauge(
        "sglang:gen_throughput", "The generation throughput (token/s).", per_rank(m.gen_throughput)
    )
    w.gauge("sglang:token_usage", "The token usage of the KV cache.", per_rank(usage))
    w.gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", per_rank(0.0))
    w.gauge(
        "sglang:spec_accept_length",
        "Recent average accept length (tokens per step).",
        per_rank(m.accept_length),
    )
    w.gauge(
        "sglang:spec_accept_rate",
        "Recent fraction of draft tokens accepted.",
        per_rank(m.accept_rate),
    )
    if core.speculative:
        # The active adaptive tier (the last step's draft length; topk 1: K + 1 draft tokens).
        w.gauge(
            "sglang:spec_num_steps",
            "The number of speculative draft steps of the active tier.",
            per_rank(core.draft_length),
        )
        w.gauge(
            "sglang:spec_num_draft_tokens",
            "The number of speculative draft tokens of the active tier.",
            per_rank(core.draft_length + 1),
        )
    # As SGLang 0.5.23 (srt/metrics/collector.py): these counters move when a request
    # finishes, and the only speculative counter is the verify-call count (no drafted- or
    # accepted-token counter exists upstream).
    w.counter(
        "sglang:prompt_tokens_total",
        "Number of prefill tokens processed.",
        base,
        m.finished_prompt_tokens,
    )
    w.counter(
        "sglang:generation_tokens_total",
        "Number of generation tokens processed.",
        base,
        m.finished_generation_tokens,
    )
    w.counter(
        "sglang:num_requests_total",
        "Number of requests processed.",
        {**base, "is_streaming": "true"},
        m.finished_requests,
    )
    w.counter("sglang:num_aborted_requests_total", "Requests aborted.", base, core.aborted)
    if core.speculative:
        w.counter(
            "sglang:spec_verify_calls_total",
            "Number of speculative verification calls.",
            base,
            m.finished_verify_calls,
        )
    w.histogram("sglang:time_to_first_token_seconds", "Time to first token.", base, m.ttft)
    w.histogram(
        "sglang:inter_token_latency_seconds", "Token-level inter-token latency.", base, m.itl
    )
    w.histogram("sglang:e2e_request_latency_seconds", "End-to-end request latency.", base, m.e2e)
    return w.text()


def _render_vllm(m: EngineMetrics, core: SchedulerCore) -> bytes:
    w = _Writer()
    base = {"engine": "0", "model_name": m.model}
    usage = core.kv_used / core.profile.kv_tokens
    w.gauge(
        "vllm:num_requests_running",
        "Requests in model execution batches.",
        [(base, len(core.running))],
    )
    w.gauge(
        "vllm:num_requests_waiting", "Requests waiting to be processed.", [(base, len(core.queue))]
    )
    w.gauge(
        "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", [(base, usage)]
    )
    w.counter("vllm:prompt_tokens_total", "Prefill tokens processed.", base, core.prompt_tokens)
    w.counter(
        "vllm:generation_tokens_total", "Generation tokens processed.", base, core.generated_tokens
    )
    w.family("vllm:request_success_total", "counter", "Successfully processed requests.")
    for reason in ("length", "stop", "abort"):
        w.sample(
            "vllm:request_success_total",
            {**base, "finished_reason": reason},
            m.finished_by_reason.get(reason, 0),
        )
    if core.speculative:
        # vLLM counts drafting steps only: a step a schedule runs at K=0 moves none of these.
        w.counter(
            "vllm:spec_decode_num_drafts_total", "Speculative drafts.", base, core.draft_steps
        )
        w.counter(
            "vllm:spec_decode_num_draft_tokens_total", "Draft tokens.", base, core.spec_draft_tokens
        )
        w.counter(
            "vllm:spec_decode_num_accepted_tokens_total",
            "Accepted draft tokens.",
            base,
            core.spec_accepted,
        )
    w.histogram("vllm:time_to_first_token_seconds", "Time to first token.", base, m.ttft)
    w.histogram("vllm:inter_token_latency_seconds", "Inter-token latency.", base, m.itl)
    w.histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency.", base, m.e2e)
    return w.text()
