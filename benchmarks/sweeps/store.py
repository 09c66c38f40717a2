"""The sweep jobs' async face onto the database: an ``async`` twin of each service or selector
the ``sweep.run`` job and its split and shard supervisors call (``handler``, ``distributed``),
in the manner of contrib.sessions' ``load`` / ``aload``, and ``ServiceStore``, the recorder's
default store.

The audit at a sweep's end is run through a function handed over by the app's wiring
(``register_sweep_audit``, from ``BenchmarksConfig.ready``): the audit reads both slices, so it
sits above them, and this slice does not import it.

This module is the one place the sweep jobs wrap synchronous code with ``sync_to_async``. Each
twin is its service wrapped once: its signature is the service's own (asgiref types the wrap
with the service's parameters), so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Protocol, cast

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from benchlib.loadgen.events import SampleEvent
from benchlib.loadgen.summary import LevelSummary
from benchmarks.handover import Handover
from benchmarks.sweeps import recording, selectors
from benchmarks.sweeps.rows import SweepSnapshot
from hosts.telemetry.levels import ServerMetrics

asweep_begin = sync_to_async(recording.sweep_begin)
asweep_finish = sync_to_async(recording.sweep_finish)
asweep_model_discovered = sync_to_async(recording.sweep_model_discovered)
asweep_levels_cut_by_crash = sync_to_async(recording.sweep_levels_cut_by_crash)
asweep_level_started = sync_to_async(recording.sweep_level_started)
asweep_level_finished = sync_to_async(recording.sweep_level_finished)
asweep_samples_add = sync_to_async(recording.sweep_samples_add)
ainstance_state = sync_to_async(selectors.instance_state)


class SweepAudit(Protocol):
    """Audit one sweep and keep the outcome on it (``benchmarks.audit.audit_sweep_store``)."""

    def __call__(self, *, sweep_id: int) -> object: ...


_sweep_audit: Handover[SweepAudit] = Handover("sweep audit")
register_sweep_audit = _sweep_audit.register


async def aaudit_sweep_store(*, sweep_id: int) -> None:
    """The audit handed over by ``register_sweep_audit``, off the event loop."""
    await sync_to_async(_sweep_audit.get())(sweep_id=sweep_id)


async def asweep_level_server_metrics_save(
    sweep_id: int, index: int, metrics: ServerMetrics
) -> None:
    """Positional, in the shape `LevelServerMetrics` takes as its `save`."""
    # The service stores it as a JSON field's contents; a plain-dict copy (the same keys and
    # values) is what its parameter takes.
    await sync_to_async(recording.sweep_level_server_metrics_save)(
        sweep_id=sweep_id, index=index, metrics=dict(metrics)
    )


async def asweep_snapshot(*, sweep_id: int) -> SweepSnapshot | None:
    """For the sweep page's consumer: Channels' wrap closes stale connections around it."""
    snapshot = await database_sync_to_async(selectors.sweep_snapshot)(sweep_id=sweep_id)
    return cast("SweepSnapshot | None", snapshot)


class ServiceStore:
    """Where a ``SweepRecorder`` writes by default: the recording services, off the event loop
    (the ORM is sync)."""

    async def level_started(self, *, sweep_id: int, index: int, concurrency: int, t: float) -> None:
        await asweep_level_started(sweep_id=sweep_id, index=index, concurrency=concurrency, t=t)

    async def level_finished(self, *, sweep_id: int, summary: LevelSummary) -> None:
        await asweep_level_finished(sweep_id=sweep_id, summary=summary)

    async def samples_add(self, *, sweep_id: int, samples: list[SampleEvent]) -> None:
        await asweep_samples_add(sweep_id=sweep_id, samples=samples)
