"""Constructed sweep data for the statistics tests."""

from __future__ import annotations

import random

from benchlib.stats.types import Ratio, RequestPoint


def closed_loop_requests(
    *, concurrency: int, per_slot: int, tok_per_s: float, seed: int, tokens: int = 200
) -> list[RequestPoint]:
    """``concurrency`` slots, each sending ``per_slot`` requests back to back.

    Each request decodes ``tokens`` +-25% at ``tok_per_s`` per stream, with 10% jitter.
    """
    rng = random.Random(seed)
    out = []
    for _ in range(concurrency):
        t = rng.uniform(0.0, 0.05)
        for _ in range(per_slot):
            n = rng.randint(int(tokens * 0.75), int(tokens * 1.25))
            duration = n / (tok_per_s * rng.uniform(0.9, 1.1))
            out.append(RequestPoint(t, t + duration, n, ttft=0.05, e2e=duration))
            t += duration
    return out


def bounds(ratio: Ratio) -> tuple[float, float]:
    assert ratio.low is not None
    assert ratio.high is not None
    return ratio.low, ratio.high
