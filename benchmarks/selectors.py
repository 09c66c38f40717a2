"""Read-side queries for sweeps and experiments.

The dicts built here are also the payloads of the sweep events (see specdash.realtime), so a
snapshot and the live events that follow it have the same shape.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from benchmarks.models import Experiment, LevelState, Sweep, SweepLevel, SweepSample
from hosts.models import InstanceState, ServerInstance


def sweep_list() -> QuerySet[Sweep]:
    return Sweep.objects.select_related("profile", "instance")


def sweep_detail(*, sweep_id: int) -> Sweep | None:
    return (
        Sweep.objects.select_related("profile", "instance", "instance__host")
        .filter(pk=sweep_id)
        .first()
    )


def sweep_levels(*, sweep_id: int) -> list[SweepLevel]:
    return list(SweepLevel.objects.filter(sweep_id=sweep_id).order_by("index"))


def sweep_target_instances() -> QuerySet[ServerInstance]:
    """The instances a new sweep can target: READY ones."""
    return (
        ServerInstance.objects.filter(state=InstanceState.READY)
        .select_related("profile", "host")
        .order_by("profile__name", "pk")
    )


def instance_state(*, instance_id: int) -> tuple[str, str] | None:
    """(state, reason) of a server instance, None if it no longer exists."""
    row = ServerInstance.objects.filter(pk=instance_id).values_list("state", "reason").first()
    return (str(row[0]), str(row[1])) if row is not None else None


def _epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def level_as_dict(level: SweepLevel) -> dict[str, Any]:
    return {
        "index": level.index,
        "concurrency": level.concurrency,
        "state": level.state,
        "output_tok_s": level.output_tok_s,
        "steady_output_tok_s": level.steady_output_tok_s,
        "ttft_p50_ms": level.ttft_p50_ms,
        "ttft_p99_ms": level.ttft_p99_ms,
        "tpot_p50_ms": level.tpot_p50_ms,
        "itl_p50_ms": level.itl_p50_ms,
        "itl_p99_ms": level.itl_p99_ms,
        "e2e_p50_ms": level.e2e_p50_ms,
        "achieved_concurrency": level.achieved_concurrency,
        "requests_ok": level.requests_ok,
        "requests_failed": level.requests_failed,
        "reason": level.reason,
        "started_at": _epoch(level.started_at),
        "finished_at": _epoch(level.finished_at),
    }


def sweep_as_dict(sweep: Sweep) -> dict[str, Any]:
    return {
        "id": sweep.pk,
        "state": sweep.state,
        "state_label": sweep.get_state_display(),
        "finished": sweep.is_finished,
        "levels": sweep.levels,
        "current_level_index": sweep.current_level_index,
        "reason": sweep.reason,
        "started_at": _epoch(sweep.started_at),
        "finished_at": _epoch(sweep.finished_at),
    }


def sweep_progress(
    *, sweep: Sweep, levels: list[SweepLevel], now: float | None = None
) -> dict[str, Any]:
    """Level k of n and a rough time-remaining estimate (None when there is no basis yet).

    Duration-limited levels take a known time each. Request-limited ones are estimated from
    the request rate of the last finished level, which overestimates below saturation (a
    higher concurrency serves requests faster): a conservative figure for the operator.
    """
    now = time.time() if now is None else now
    total = len(sweep.levels)
    finished = [lv for lv in levels if lv.state != LevelState.RUNNING]
    running = next((lv for lv in levels if lv.state == LevelState.RUNNING), None)
    current = sweep.current_level_index
    progress: dict[str, Any] = {
        "level_number": (current + 1) if current is not None else 0,
        "level_count": total,
        "finished_levels": len(finished),
        "eta_s": None,
        "as_of": now,
    }
    if sweep.is_finished:
        progress["eta_s"] = 0.0
        return progress
    per_level: float | None = None
    duration = sweep.load.get("duration")
    requests = sweep.load.get("requests_per_level")
    if duration:
        per_level = float(duration)
    elif requests and finished:
        rate = (finished[-1].summary or {}).get("request_rate")
        if rate:
            per_level = float(requests) / float(rate)
    if per_level is None:
        return progress
    not_started = total - len(finished) - (1 if running is not None else 0)
    eta = max(0, not_started) * per_level
    if running is not None and running.started_at is not None:
        eta += max(0.0, per_level - (now - running.started_at.timestamp()))
    progress["eta_s"] = eta
    return progress


def sweep_state_payload(*, sweep: Sweep) -> dict[str, Any]:
    levels = sweep_levels(sweep_id=sweep.pk)
    return {"sweep": sweep_as_dict(sweep), "progress": sweep_progress(sweep=sweep, levels=levels)}


def sweep_snapshot(*, sweep_id: int, max_samples: int = 3600) -> dict[str, Any] | None:
    """State so far, for a viewer who joins mid-run (then the live events follow)."""
    sweep = sweep_detail(sweep_id=sweep_id)
    if sweep is None:
        return None
    samples = list(
        SweepSample.objects.filter(sweep_id=sweep_id)
        .order_by("-t")
        .values("level_index", "t", "data")[:max_samples]
    )
    samples.reverse()
    levels = sweep_levels(sweep_id=sweep_id)
    return {
        "sweep": sweep_as_dict(sweep),
        "levels": [level_as_dict(level) for level in levels],
        "samples": [{**s["data"], "level_index": s["level_index"], "t": s["t"]} for s in samples],
        "progress": sweep_progress(sweep=sweep, levels=levels),
    }


def experiment_list() -> QuerySet[Experiment]:
    return Experiment.objects.prefetch_related("arms__profile")
