"""What telemetry needs to know of the sweeps that run on a host, given by the app that runs them.

``hosts`` sits below ``benchmarks`` and does not import it: the samples taken while a sweep
runs are kept with that sweep, and a sweep page charts its host over the sweep's span, so
``benchmarks`` hands both lookups over in its ``AppConfig.ready()`` (as the apps register
their job handlers with the core).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SweepSpan:
    """Where and when a sweep ran: its server's host and instance, epoch seconds."""

    host_id: int
    # None for a server specdash did not start (an endpoint profile registered on the host).
    instance_id: int | None
    started: float
    finished: float | None


@dataclass(frozen=True)
class HostSweeps:
    """The sweeps running on a host now."""

    # {instance id: sweep id}: sweeps of servers specdash started on the host.
    by_instance: dict[int, int] = field(default_factory=dict)
    # Sweeps of endpoint profiles registered on the host: no instance, but the host is theirs
    # to sample as a managed server's is (its GPUs and load are what the sweep loads).
    endpoints: tuple[int, ...] = ()
    # {sweep id: metrics URL} of those endpoint sweeps: the server is scraped there while its
    # sweep runs, as a managed instance's /metrics is.
    endpoint_metrics: dict[int, str] = field(default_factory=dict)

    @property
    def ids(self) -> list[int]:
        return [*self.by_instance.values(), *self.endpoints]


# host id -> the sweeps running on it
RunningSweeps = Callable[[int], HostSweeps]
# sweep id -> its span, or None when there is no such sweep or it had no server
SpanOfSweep = Callable[[int], SweepSpan | None]


@dataclass
class _Source:
    running: RunningSweeps | None = None
    span_of: SpanOfSweep | None = None


_source = _Source()


def register_sweep_source(*, running: RunningSweeps, span_of: SpanOfSweep) -> None:
    _source.running = running
    _source.span_of = span_of


def running_sweeps(host_id: int) -> HostSweeps:
    if _source.running is None:
        raise RuntimeError("no sweep source registered (benchmarks registers it when ready)")
    return _source.running(host_id)


def sweep_span(pk: int) -> SweepSpan | None:
    if _source.span_of is None:
        raise RuntimeError("no sweep source registered (benchmarks registers it when ready)")
    return _source.span_of(pk)
