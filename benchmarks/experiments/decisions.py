"""The evidence of a comparison handed to ``benchlib.stats.decision``: each level's health from
its runs' summaries, and, at a fixed request rate, the latency curves that decide there.

Every surface (comparison page, HTML report, CSV, API, ``manage.py specdash``) renders the
stored ``decision`` of a verdict; none writes a conclusion of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from benchlib.arrays.columns import RequestArrays
from benchlib.stats.decision import Arm, ArmHealth, Decision, LevelEvidence
from benchlib.stats.decision_rule import decide
from benchlib.stats.intervals import quantile
from benchlib.stats.types import Curve, LevelSample, RatioCurve, RequestPoint
from benchmarks.sweeps.health import client_state, request_counts, starved_state

# At a fixed request rate, the figure that decides (lower is better).
RATE_FIGURE = "tpot_p50_ms"

# A sweep's load settings that size or guard a level but do not change what is asked of the
# server, and the model name (each server's own, often discovered from it: which model ran is
# the environment record's to compare); every other setting (prompts, lengths, sampling, API,
# rate, ...) is the workload. Controller tracking only reads the server's /metrics once a second.
_NOT_WORKLOAD = frozenset(
    {
        "requests_per_level",
        "duration",
        "warmup_requests",
        "request_timeout",
        "slo",
        "model",
        "controller_tracking",
    }
)


def workload_fingerprint(load: Mapping[str, Any] | None) -> str:
    """The workload settings of a sweep's load as "key=value" items joined by "; ", sorted:
    equal strings for the same workload, and readable where two differ (``decision`` names the
    differing items). "" when the load is unknown."""
    if not load:
        return ""
    return "; ".join(
        f"{key}={json.dumps(value, sort_keys=True)}"
        for key, value in sorted(load.items())
        if key not in _NOT_WORKLOAD
    )


def arm_health(runs: Sequence[Any]) -> ArmHealth:
    """One arm's health at one level from its runs (``level_runs.LevelRun``s), each run's
    summary read by ``sweeps.health`` as the sweep page reads it."""
    requests = failed = cancelled = 0
    achieved: list[float] = []
    limited = starved = False
    warning = starved_reason = ""
    workloads: list[str] = []
    for run in runs:
        counts = request_counts(run.summary)
        requests += counts.total
        failed += counts.failed
        cancelled += counts.cancelled
        value = run.figures.get("achieved_concurrency")
        if isinstance(value, int | float):
            achieved.append(float(value))
        run_limited, said = client_state(run.summary)
        if run_limited:
            limited = True
            warning = warning or said
        starved = starved or bool((run.server or {}).get("load_source_starved"))
        run_starved, why = starved_state(run.summary)
        if run_starved:
            starved = True
            starved_reason = starved_reason or why
        workload = getattr(run, "workload", "")
        if workload and workload not in workloads:
            workloads.append(workload)
    return ArmHealth(
        requests=requests,
        failed=failed,
        cancelled=cancelled,
        achieved_concurrency=min(achieved) if achieved else None,
        client_limited=limited,
        client_warning=warning,
        load_source_starved=starved,
        starved_reason=starved_reason,
        # An arm whose own runs differ in workload carries them all: it matches no other arm.
        workload=" | ".join(workloads),
    )


def is_rate_mode(runs: Sequence[Any]) -> bool:
    """Whether the levels ran at a fixed request rate (open loop), from their summaries."""
    return any((run.summary or {}).get("mode") == "rate" for run in runs)


def tpot_statistic(requests: Sequence[RequestPoint]) -> float:
    """The median TPOT (ms) of a list of requests, as the load generator computes it."""
    if isinstance(requests, RequestArrays):
        return requests.median_tpot_ms(quantile)
    values = sorted(
        (r.e2e - r.ttft) / (r.output_tokens - 1)
        for r in requests
        if r.e2e is not None and r.ttft is not None and r.output_tokens > 1
    )
    return quantile(values, 0.5) * 1e3 if values else 0.0


def latency_curve(
    name: str, grouped: Mapping[int, Sequence[Any]], requests: Mapping[int, Sequence[RequestPoint]]
) -> Curve:
    """TPOT p50 (ms) against C: repeats when a level has several runs, else the level's
    requests for batch means of the median (``tpot_statistic``)."""
    levels = []
    for c, runs in grouped.items():
        values = [run.figures.get(RATE_FIGURE) for run in runs]
        if not all(isinstance(v, int | float) and v > 0 for v in values):
            continue
        floats = [float(v) for v in values if v is not None]
        if len(floats) >= 2:
            levels.append(LevelSample.from_repeats(c, floats))
        elif len(requests.get(c, ())) >= 2:
            levels.append(LevelSample(c, floats[0], requests=requests[c]))
        else:
            levels.append(LevelSample(c, floats[0]))
    return Curve(name, levels, unit="ms")


def decision_from(
    *,
    reference: Arm,
    candidate: Arm,
    ratios: RatioCurve,
    health: Mapping[int, tuple[ArmHealth, ArmHealth]],
    figure: str,
    rate_mode: bool,
    runs_per_arm: Mapping[int, int],
    confidence: float,
    drift: Mapping[int, float] | None = None,
    latency: Mapping[int, tuple[Mapping[str, float | None], Mapping[str, float | None]]]
    | None = None,
) -> Decision:
    """The decision of one candidate from the ratios its verdict computed; ``drift`` maps C
    to the largest first-to-last change of an arm's own runs (``benchlib.stats.drift``), which
    holds a level inconclusive when it exceeds the margin."""
    evidence = [
        LevelEvidence(
            lr.concurrency,
            lr.ratio,
            repeats=runs_per_arm.get(lr.concurrency, 1),
            reference=health.get(lr.concurrency, (ArmHealth(), ArmHealth()))[0],
            candidate=health.get(lr.concurrency, (ArmHealth(), ArmHealth()))[1],
            drift=(drift or {}).get(lr.concurrency),
            latency=(latency or {}).get(lr.concurrency),
        )
        for lr in ratios.levels
    ]
    return decide(
        reference=reference,
        candidate=candidate,
        levels=evidence,
        figure=figure,
        rate_mode=rate_mode,
        confidence=confidence,
    )
