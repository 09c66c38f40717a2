from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from functools import lru_cache

from .profiles import Profile


def acceptance_probability(accept_length: float, spec_steps: int) -> float:
    """Per-draft-token acceptance probability p of a chain of `spec_steps` drafts.

    A step accepts draft i only if drafts 1..i-1 were accepted, so the number accepted is a
    geometric draw truncated at `spec_steps` and E[accepted] = p + p^2 + ... + p^S. Solved by
    bisection for E[accepted] = accept_length - 1.
    """
    target = accept_length - 1.0
    if spec_steps < 1 or not 0.0 <= target <= spec_steps:
        raise ValueError(f"accept length {accept_length} impossible with {spec_steps} draft steps")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(1, spec_steps + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@lru_cache(maxsize=32)
def emitted_distribution(accept_length: float, spec_steps: int) -> tuple[float, ...]:
    """P(a step emits n tokens) for n = 1 .. spec_steps + 1 (index n - 1)."""
    p = acceptance_probability(accept_length, spec_steps)
    probs = [p**j * (1 - p) for j in range(spec_steps)]
    probs.append(p**spec_steps)
    return tuple(probs)


class TokenDraw:
    """Draws tokens emitted per request per step: 1 (baseline) or 1 + accepted drafts."""

    def __init__(
        self, profile: Profile, rng: random.Random, *, accept_length: float | None = None
    ) -> None:
        self.speculative = profile.speculative and profile.spec_steps > 0
        self.spec_steps = profile.spec_steps
        self._random = rng.random
        length = profile.accept_length if accept_length is None else accept_length
        cdf: list[float] = []
        if self.speculative:
            acc = 0.0
            for prob in emitted_distribution(length, profile.spec_steps):
                acc += prob
                cdf.append(acc)
            cdf[-1] = 1.0
        self._cdf = cdf

    def draw(self) -> int:
        if not self.speculative:
            return 1
        return bisect.bisect_right(self._cdf, self._random()) + 1


def expected_steps(profile: Profile, output_tokens: int) -> float:
    """Expected steps to emit `output_tokens` (the last step may be cut short): the first
    token comes from prefill alone, the rest from verify steps."""
    if not (profile.speculative and profile.spec_steps > 0) or output_tokens <= 1:
        return float(output_tokens)
    probs = emitted_distribution(profile.accept_length, profile.spec_steps)
    steps = [0.0] * (output_tokens + 1)
    for remaining in range(1, output_tokens + 1):
        steps[remaining] = 1.0 + sum(
            prob * steps[max(0, remaining - n)] for n, prob in enumerate(probs, start=1)
        )
    return 1.0 + steps[output_tokens - 1]


@dataclass(frozen=True)
class Prediction:
    concurrency: int
    running: float
    step_seconds: float
    output_tok_s: float
    per_request_tok_s: float


def predict_closed_loop(
    profile: Profile,
    concurrency: int,
    *,
    prompt_tokens: int,
    output_tokens: int,
    request_overhead_s: float = 0.0,
) -> Prediction:
    """Steady-state aggregate output throughput of `concurrency` closed-loop clients.

    Each client sends a request of `prompt_tokens` and `output_tokens` (ignore_eos), waits for it,
    and sends the next after `request_overhead_s`. In steady state b requests run, a request needs
    s = expected_steps decode steps, b/s requests finish (and as many are prefilled) per step, so
    a step lasts t(b) + (b/s)*prefill. Solved as a fixed point in b when the overhead keeps some
    clients out of the batch. KV budget limits are ignored (size the budget above C * length).
    """
    steps_per_req = expected_steps(profile, output_tokens)
    prefill = profile.prefill_seconds(prompt_tokens)
    cap = min(concurrency, profile.max_running)
    running = float(cap)
    step = 0.0
    for _ in range(200):
        step = profile.step_seconds(running) + running / steps_per_req * prefill
        busy = steps_per_req * step
        in_batch = concurrency * busy / (busy + request_overhead_s)
        new_running = min(float(cap), in_batch)
        if abs(new_running - running) < 1e-6:
            break
        running = (running + new_running) / 2
    step = profile.step_seconds(max(1.0, running)) + running / steps_per_req * prefill
    throughput = running * output_tokens / steps_per_req / step if step > 0 else float("inf")
    per_request = output_tokens / (steps_per_req * step) if step > 0 else float("inf")
    return Prediction(concurrency, running, step, throughput, per_request)
