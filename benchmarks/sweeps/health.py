"""What a level's stored summary says about the level itself: whether the load generator was
the bottleneck (``client_limited``), whether a closed loop reached the concurrency it was
asked for, and how many requests failed or were cancelled (stopped by the client at the
level's end: not failures). Read once here; the sweep page shows it and the comparison's
decision (``benchmarks.experiments.decisions.arm_health``) judges from the same reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from benchlib.stats.decision_rule import ACHIEVED_SHARE


@dataclass(frozen=True)
class RequestCounts:
    total: int
    failed: int  # failures other than cancellation
    cancelled: int


def request_counts(summary: Mapping[str, Any] | None) -> RequestCounts:
    """The level's request counts; the load generator counts a cancelled request among its
    failed ones (``errors_by_cause["cancelled"]``), taken out of ``failed`` here."""
    counts = (summary or {}).get("requests") or {}
    causes = counts.get("errors_by_cause") or {}
    cancelled = int(causes.get("cancelled") or 0)
    failed = max(int(counts.get("failed") or 0) - cancelled, 0)
    return RequestCounts(int(counts.get("total") or 0), failed, cancelled)


def starved_state(summary: Mapping[str, Any] | None) -> tuple[bool, str]:
    """(load_source_starved, why): the load generator's own arrivals ran late against their
    schedule (``benchlib.loadgen.health.arrival_health``)."""
    client = (summary or {}).get("client") or {}
    if not client.get("load_source_starved"):
        return False, ""
    return True, str(client.get("starved_reason") or "")


def client_state(summary: Mapping[str, Any] | None) -> tuple[bool, str]:
    """(client_limited, what the load generator said about itself: its warnings joined)."""
    client = (summary or {}).get("client") or {}
    if not client.get("client_limited"):
        return False, ""
    return True, "; ".join(str(w) for w in client.get("warnings") or [])


@dataclass(frozen=True)
class LevelHealth:
    asked: int  # the level's C (in a rate sweep, its concurrency cap)
    achieved: float | None
    reached: bool  # closed loop: achieved >= ACHIEVED_SHARE of asked (True when not measured)
    counts: RequestCounts
    client_limited: bool
    client_warning: str
    warnings: tuple[str, ...]  # one line each, in the order the decision checks them
    load_source_starved: bool = False


def level_health(
    *,
    concurrency: int,
    summary: Mapping[str, Any] | None,
    achieved: float | None,
    rate_mode: bool,
) -> LevelHealth:
    """A level's health from its summary and achieved concurrency. In a rate sweep the cap is
    not a target, so "C not reached" is not said there."""
    counts = request_counts(summary)
    limited, said = client_state(summary)
    starved, why = starved_state(summary)
    return health_of(
        concurrency=concurrency,
        achieved=achieved,
        counts=counts,
        client_limited=limited,
        client_warning=said,
        rate_mode=rate_mode,
        starved=starved,
        starved_reason=why,
    )


def health_of(
    *,
    concurrency: int,
    achieved: float | None,
    counts: RequestCounts,
    client_limited: bool,
    client_warning: str,
    rate_mode: bool,
    starved: bool = False,
    starved_reason: str = "",
) -> LevelHealth:
    """The health and its warning lines from figures already read (one run, or an arm's runs
    summed with the lowest achieved C, as the comparison holds them)."""
    reached = rate_mode or achieved is None or achieved >= ACHIEVED_SHARE * concurrency
    warnings: list[str] = []
    if client_limited:
        warnings.append(f"client-limited{': ' + client_warning if client_warning else ''}")
    if starved:
        warnings.append(f"load source starved{': ' + starved_reason if starved_reason else ''}")
    if not reached:
        assert achieved is not None
        warnings.append(
            f"C not reached: achieved {achieved:.3g} of the asked {concurrency} "
            f"(below {ACHIEVED_SHARE:.0%})"
        )
    if counts.failed:
        warnings.append(f"{counts.failed} of {counts.total} requests failed")
    return LevelHealth(
        asked=concurrency,
        achieved=achieved,
        reached=reached,
        counts=counts,
        client_limited=client_limited,
        client_warning=client_warning,
        warnings=tuple(warnings),
        load_source_starved=starved,
    )
