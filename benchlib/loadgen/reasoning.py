from __future__ import annotations

# Reasoning phases: a reasoning model streams its reasoning (vLLM `delta.reasoning`, SGLang
# `delta.reasoning_content`) before the answer (`delta.content`). Time to the first token of each
# phase and each phase's token gaps answer different questions: TTFT on the answer alone is what
# a user waits for, and measuring TTFT on content only while the reasoning streams is the known
# mistake (inference-perf#559). Speculation behaves differently on reasoning text, so each
# phase's pace is given on its own.
#
# Per request with a reasoning phase (`reasoning_tokens` set): time to the first reasoning token
# is `first_token - start` (the reasoning comes first), to the first answer token
# `first_answer - start`; the reasoning phase's mean token gap is
# (first_answer - first_token) / reasoning_tokens (the first answer token is that many tokens
# after the first one), the answer phase's (end of its last chunk - first_answer) / (answer
# tokens - 1).
#
# Acceptance per phase: neither vLLM nor SGLang reports a request's speculative figures split by
# phase, but both stream one chunk per verify step holding the tokens it accepted, so tokens per
# chunk in each phase is the client's reading of that phase's accept length (docs/measurement.md,
# "Acceptance per phase", says when it is not one). No record field is needed for it: the
# handler sets `reasoning_tokens` to the tokens counted before the first answer chunk, so the
# reasoning's chunks are the leading ones whose tokens add up to it.
from collections.abc import Iterable, Sequence

from benchlib.loadgen.metrics import deliveries, distribution
from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.summary import PhaseAcceptance, ReasoningFigures


def answer_chunk_index(chunk_tokens: Sequence[int], reasoning_tokens: int) -> int:
    """Index of the request's first answer chunk (its chunk count when the stream ended while
    still reasoning): the chunks before it carry the `reasoning_tokens`."""
    counted = 0
    for i, n in enumerate(chunk_tokens):
        if counted >= reasoning_tokens:
            return i
        counted += n
    return len(chunk_tokens)


class _Phase:
    """One phase's sums over the level's requests."""

    __slots__ = ("chunks", "deliveries", "requests", "tokens")

    def __init__(self) -> None:
        self.tokens = self.chunks = self.deliveries = self.requests = 0

    def add(self, times: Sequence[float], tokens: Sequence[int]) -> None:
        self.requests += 1
        self.tokens += sum(tokens)
        self.chunks += len(tokens)
        self.deliveries += len(deliveries(times, tokens))

    def figures(self) -> PhaseAcceptance:
        return {
            "tokens_per_chunk": self.tokens / self.chunks if self.chunks else None,
            "tokens_per_delivery": self.tokens / self.deliveries if self.deliveries else None,
            "tokens": self.tokens,
            "chunks": self.chunks,
            "deliveries": self.deliveries,
            "requests": self.requests,
        }


def phase_acceptance(records: Iterable[RequestRecord]) -> tuple[PhaseAcceptance, PhaseAcceptance]:
    """Tokens per streamed chunk (and per delivery, metrics.deliveries) in the reasoning phase
    and in the answer phase, summed over the requests before dividing (a request's weight is its
    chunks).

    The reasoning phase leaves out the stream's first chunk: it carries the token the prefill
    made, which no verify step produced. Requests whose chunk counts were estimated (a server
    without per-chunk usage: one token per chunk by assumption) and those with no reasoning token
    are left out of both; the answer phase counts only requests whose answer started."""
    reasoning, answer = _Phase(), _Phase()
    for r in records:
        if r.chunk_tokens_estimated or not r.reasoning_tokens or not r.chunk_tokens:
            continue
        k = answer_chunk_index(r.chunk_tokens, r.reasoning_tokens)
        # Each phase's deliveries are grouped on their own: a step whose events cross the
        # boundary is cut there, as its chunks are.
        reasoning.add(r.chunk_times[1:k], r.chunk_tokens[1:k])
        if r.first_answer is not None:
            answer.add(r.chunk_times[k:], r.chunk_tokens[k:])
    return reasoning.figures(), answer.figures()


def reasoning_figures(records: Iterable[RequestRecord]) -> ReasoningFigures | None:
    """The level's reasoning-phase figures (ms), or None when no request streamed reasoning."""
    recs = [
        r
        for r in records
        if r.ok and not r.warmup and r.reasoning_tokens is not None and r.first_token is not None
    ]
    if not recs:
        return None
    ttft_reasoning, ttft_answer, itl_reasoning, itl_answer = [], [], [], []
    for r in recs:
        assert r.first_token is not None and r.reasoning_tokens is not None
        ttft_reasoning.append(r.first_token - r.start)
        if r.first_answer is None or r.reasoning_tokens <= 0:
            continue
        ttft_answer.append(r.first_answer - r.start)
        itl_reasoning.append((r.first_answer - r.first_token) / r.reasoning_tokens)
        answer_tokens = r.output_tokens - r.reasoning_tokens
        if answer_tokens > 1 and r.chunk_times:
            itl_answer.append((r.chunk_times[-1] - r.first_answer) / (answer_tokens - 1))
    accept_reasoning, accept_answer = phase_acceptance(recs)
    return {
        "requests": len(recs),
        "answered": len(ttft_answer),
        "reasoning_tokens": distribution(float(r.reasoning_tokens or 0) for r in recs),
        "ttft_reasoning_ms": distribution(ttft_reasoning, scale=1e3),
        "ttft_answer_ms": distribution(ttft_answer, scale=1e3),
        "itl_reasoning_ms": distribution(itl_reasoning, scale=1e3),
        "itl_answer_ms": distribution(itl_answer, scale=1e3),
        "accept_reasoning": accept_reasoning,
        "accept_answer": accept_answer,
    }
