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
# tokens - 1). Acceptance per phase needs per-phase figures from the engine, which neither vLLM
# nor SGLang reports per request: it is not given.
from collections.abc import Iterable
from typing import Any

from benchlib.loadgen.metrics import distribution
from benchlib.loadgen.records import RequestRecord


def reasoning_figures(records: Iterable[RequestRecord]) -> dict[str, Any] | None:
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
    return {
        "requests": len(recs),
        "answered": len(ttft_answer),
        "reasoning_tokens": distribution(float(r.reasoning_tokens or 0) for r in recs),
        "ttft_reasoning_ms": distribution(ttft_reasoning, scale=1e3),
        "ttft_answer_ms": distribution(ttft_answer, scale=1e3),
        "itl_reasoning_ms": distribution(itl_reasoning, scale=1e3),
        "itl_answer_ms": distribution(itl_answer, scale=1e3),
    }
