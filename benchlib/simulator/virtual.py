from __future__ import annotations

import heapq
from dataclasses import dataclass

from .adaptive import AdaptiveSpeculation
from .profiles import Profile
from .scheduler import SchedulerCore, SimRequest


@dataclass(frozen=True)
class VirtualRun:
    output_tok_s: float
    tokens: int
    request_steps: int
    finished: int
    mean_tokens_per_chunk: float


def simulate_closed_loop(
    profile: Profile,
    concurrency: int,
    *,
    prompt_tokens: int,
    output_tokens: int,
    duration_s: float,
    warmup_s: float = 0.0,
    request_overhead_s: float = 0.0,
    seed: int = 0,
    speculation: AdaptiveSpeculation | None = None,
) -> VirtualRun:
    """Run the scheduler against `concurrency` closed-loop clients on a virtual clock.

    Throughput is counted over [warmup_s, duration_s], so the ramp-up is excluded.
    `speculation`: a draft length per running batch, as a server started with the engines'
    flags (engine_flags.speculation_from_args) runs.
    """
    core = SchedulerCore(profile, seed=seed, speculation=speculation)
    arrivals: list[tuple[float, int]] = []
    seq = 0

    def new_request(at: float) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(arrivals, (at, seq))

    for _ in range(concurrency):
        new_request(0.0)
    clock = 0.0
    base_tokens = base_steps = base_finished = 0
    measuring = warmup_s <= 0.0
    while clock < duration_s:
        while arrivals and arrivals[0][0] <= clock:
            _, n = heapq.heappop(arrivals)
            core.submit(
                SimRequest(
                    request_id=str(n),
                    prompt_tokens=prompt_tokens,
                    max_tokens=output_tokens,
                    target=output_tokens,
                    target_reason="length",
                    arrival=clock,
                )
            )
        admitted = core.admit(clock)
        if not core.running:
            clock = arrivals[0][0] if arrivals else duration_s
            continue
        clock += core.step_seconds(admitted)
        if not measuring and clock >= warmup_s:
            measuring = True
            base_tokens, base_steps = core.generated_tokens, core.request_steps
            base_finished = core.finished
        for _req in core.advance():
            new_request(clock + request_overhead_s)
    tokens = core.generated_tokens - base_tokens
    steps = core.request_steps - base_steps
    window = duration_s - max(0.0, warmup_s)
    return VirtualRun(
        output_tok_s=tokens / window,
        tokens=tokens,
        request_steps=steps,
        finished=core.finished - base_finished,
        mean_tokens_per_chunk=tokens / steps if steps else 0.0,
    )
