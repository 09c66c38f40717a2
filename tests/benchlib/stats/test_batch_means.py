from __future__ import annotations

import math
import random
from collections.abc import Callable

from benchlib.stats.batch_means import MIN_BLOCKS, achieved_concurrency, time_blocks
from benchlib.stats.decision import WITHIN_RUN, Arm
from benchlib.stats.decision_rule import decide_curves
from benchlib.stats.intervals import interval_scope, quantile
from benchlib.stats.types import Curve, LevelSample, RequestPoint, inside_margin

ARMS = (Arm("A", "A"), Arm("B", "B"))


def _run(
    rng: random.Random, *, concurrency: int, requests: int, speed: float, wander: float
) -> list[RequestPoint]:
    """A closed loop of ``concurrency`` slots whose per-token speed wanders over the run (an
    AR(1) machine state, as another tenant's load would): consecutive requests are correlated,
    which a bootstrap over single requests takes for independent draws."""
    out: list[RequestPoint] = []
    free = [rng.uniform(0.0, 0.01) for _ in range(concurrency)]
    state = 0.0
    for _ in range(requests):
        slot = min(range(concurrency), key=free.__getitem__)
        start = free[slot]
        state = 0.5 * state + rng.gauss(0.0, wander)
        tokens = 64
        duration = tokens / (speed * math.exp(state) * rng.uniform(0.97, 1.03))
        out.append(RequestPoint(start, start + duration, tokens))
        free[slot] = start + duration
    return out


def _request_bootstrap(
    a: list[RequestPoint], b: list[RequestPoint], *, n_boot: int, seed: int
) -> tuple[float, float]:
    """The single-run interval before batch means, kept as this file's contrast: a 95%
    percentile bootstrap of B/A over each side's single requests, each resample's throughput
    by the slot rate (tokens over durations, times the level's achieved concurrency)."""

    def slot_rate(requests: list[RequestPoint]) -> Callable[[random.Random], float]:
        tokens = [r.output_tokens for r in requests]
        durations = [r.duration for r in requests]
        span = max(r.end for r in requests) - min(r.start for r in requests)
        concurrency = sum(durations) / span

        def resampled(rng: random.Random) -> float:
            idx = rng.choices(range(len(tokens)), k=len(tokens))
            return sum(tokens[i] for i in idx) / sum(durations[i] for i in idx) * concurrency

        return resampled

    rate_a, rate_b = slot_rate(a), slot_rate(b)
    rng = random.Random(seed)
    replicates = []
    for _ in range(n_boot):
        num = rate_b(rng)
        den = rate_a(rng)
        replicates.append(num / den if den > 0 else math.inf)
    replicates.sort()
    return quantile(replicates, 0.025), quantile(replicates, 0.975)


def _flagged(low: float | None, high: float | None) -> bool:
    if low is None or high is None or inside_margin(low, high, 0.02):
        return False
    return low > 1.0 or high < 1.0


def test_blocks_are_contiguous_in_start_order_and_hold_a_batch_turnover_each() -> None:
    rng = random.Random(1)
    reqs = _run(rng, concurrency=4, requests=40, speed=50.0, wander=0.0)
    blocks = time_blocks(list(reversed(reqs)))
    assert len(blocks) >= MIN_BLOCKS
    flat = [r for block in blocks for r in block]
    assert flat == sorted(reqs, key=lambda r: (r.start, r.end))
    assert min(len(b) for b in blocks) >= math.ceil(achieved_concurrency(reqs))
    assert time_blocks(reqs[:8]) == []  # 8 requests at C=4: two blocks, too few


def test_a_single_run_aa_with_a_wandering_machine_concludes_rarely_unlike_a_request_bootstrap():
    # 300 pairs of identical servers, one run each, the machine's speed wandering within runs.
    rng = random.Random(4)
    batch_flags = boot_flags = 0
    trials = 300
    for _ in range(trials):
        a = LevelSample.from_requests(
            2, _run(rng, concurrency=2, requests=40, speed=50.0, wander=0.02)
        )
        b = LevelSample.from_requests(
            2, _run(rng, concurrency=2, requests=40, speed=50.0, wander=0.02)
        )
        (level,) = decide_curves(Curve("A", [a]), Curve("B", [b]), arms=ARMS).levels
        assert level.ratio.method == "batch-means-log-t"
        batch_flags += level.status in ("ahead", "behind")
        boot = _request_bootstrap(
            list(a.requests), list(b.requests), n_boot=200, seed=len(a.requests)
        )
        boot_flags += _flagged(*boot)
    assert batch_flags / trials <= 0.05
    assert boot_flags / trials > 0.1  # what the single-run mode did before batch means


def test_a_five_percent_faster_single_run_is_found_and_labelled_within_run() -> None:
    rng = random.Random(9)
    ahead = 0
    for _ in range(40):
        a = LevelSample.from_requests(
            1, _run(rng, concurrency=1, requests=40, speed=50.0, wander=0.002)
        )
        b = LevelSample.from_requests(
            1, _run(rng, concurrency=1, requests=40, speed=52.5, wander=0.002)
        )
        decision = decide_curves(Curve("A", [a]), Curve("B", [b]), arms=ARMS)
        (level,) = decision.levels
        ahead += level.status == "ahead"
        assert level.within_run and WITHIN_RUN in level.sentence
        assert WITHIN_RUN in decision.summary
        assert interval_scope(level.ratio.method) == WITHIN_RUN
    assert ahead / 40 >= 0.9
