"""Read-side queries for sweeps and experiments.

The rows built here (typed in benchmarks.sweeps.rows) are also the payloads of the sweep
events (benchmarks.sweeps.channel), so a snapshot and the live events that follow it have the
same shape.
"""

from __future__ import annotations

import time
from datetime import datetime

from django.db.models import QuerySet

from benchlib.json_types import PlotlyFigure
from benchmarks.controller_report import ControllerSection, tracks_context
from benchmarks.phases import PhaseBlocks, phases_row, ramp_figure
from benchmarks.sweeps.health import level_health
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepSample, SweepState
from benchmarks.sweeps.plan import LevelPlan, is_rate_sweep, level_label, sweep_level_plan
from benchmarks.sweeps.rows import LevelRow, SweepProgress, SweepRow, SweepSnapshot
from hosts.models import InstanceState, ProfileKind, ServerInstance, ServerProfile
from hosts.telemetry.sweeps import HostSweeps, SweepSpan


def sweeps_running_on_host(host_id: int) -> HostSweeps:
    """The sweeps running against the host's servers: those specdash started (by instance)
    and those of endpoint profiles registered on it (telemetry keeps the samples taken
    meanwhile with them)."""
    rows = Sweep.objects.filter(
        state=SweepState.RUNNING, instance__host_id=host_id, instance__isnull=False
    ).values_list("instance_id", "pk")
    endpoint_sweeps = Sweep.objects.filter(
        state=SweepState.RUNNING,
        instance__isnull=True,
        profile__kind=ProfileKind.ENDPOINT,
        profile__host_id=host_id,
    ).select_related("profile")
    endpoint_metrics = {
        sweep.pk: sweep.profile.endpoint_metrics_url
        for sweep in endpoint_sweeps
        if sweep.profile is not None
    }
    return HostSweeps(
        by_instance={int(i): int(pk) for i, pk in rows if i is not None},
        endpoints=tuple(sorted(endpoint_metrics)),
        endpoint_metrics=endpoint_metrics,
    )


def sweep_span(pk: int) -> SweepSpan | None:
    """Where and when the sweep ran, for the telemetry chart of its page: its server's host,
    or the host its endpoint profile is registered on (None when neither)."""
    sweep = Sweep.objects.select_related("instance", "profile").filter(pk=pk).first()
    if sweep is None:
        return None
    endpoint_host_id = sweep_endpoint_host_id(sweep=sweep)
    instance_id: int | None = None
    if sweep.instance is not None:
        host_id, instance_id = sweep.instance.host_id, sweep.instance.pk
    elif endpoint_host_id is not None:
        host_id = endpoint_host_id
    else:
        return None
    begun = sweep.started_at or sweep.created_at
    return SweepSpan(
        host_id=host_id,
        instance_id=instance_id,
        started=begun.timestamp(),
        finished=sweep.finished_at.timestamp() if sweep.finished_at else None,
    )


def sweep_endpoint_host_id(*, sweep: Sweep) -> int | None:
    """The registered host of the endpoint profile the sweep measured, None for a sweep of a
    managed server, of a bare URL, or of an endpoint on no registered host."""
    profile = sweep.profile
    if sweep.instance_id is not None or profile is None or not profile.is_endpoint:
        return None
    return profile.host_id


def sweep_list() -> QuerySet[Sweep]:
    return Sweep.objects.select_related("profile", "instance")


def sweep_detail(*, sweep_id: int) -> Sweep | None:
    return (
        Sweep.objects.select_related("profile", "profile__host", "instance", "instance__host")
        .filter(pk=sweep_id)
        .first()
    )


def sweep_levels(*, sweep_id: int) -> list[SweepLevel]:
    return list(SweepLevel.objects.filter(sweep_id=sweep_id).order_by("index"))


def sweep_is_rate_sweep(*, sweep: Sweep) -> bool:
    """Whether the sweep's levels are request rates under one concurrency cap."""
    return is_rate_sweep(sweep.load or {})


def _level_rate(level: SweepLevel, plan: LevelPlan | None) -> float | None:
    """A level's offered rate: as its summary recorded it, else as the sweep planned it."""
    stored = (level.summary or {}).get("target_rate")
    if isinstance(stored, int | float):
        return float(stored)
    if plan is not None and level.index < len(plan):
        return plan[level.index][1]
    return None


def sweep_level_table(*, sweep: Sweep) -> list[SweepLevel]:
    """The sweep's levels (one query), each given ``offered_rate`` (req/s, None in a closed
    loop), ``rate_text``, ``label`` (its offered rate in a rate sweep, else its C) and
    ``health`` (``sweeps.health.level_health``, from its stored summary)."""
    plan = sweep_level_plan(sweep.levels, sweep.load)
    rate_sweep = is_rate_sweep(sweep.load)
    levels = sweep_levels(sweep_id=sweep.pk)
    for level in levels:
        rate = _level_rate(level, plan)
        # Display attributes on the rows the template iterates (not model fields).
        setattr(level, "offered_rate", rate)  # noqa: B010
        setattr(level, "rate_text", f"{rate:g}" if rate is not None else "-")  # noqa: B010
        setattr(level, "label", level_label(level.concurrency, rate, rate_sweep=rate_sweep))  # noqa: B010
        health = level_health(
            concurrency=level.concurrency,
            summary=level.summary,
            achieved=level.achieved_concurrency,
            rate_mode=rate_sweep,
        )
        setattr(level, "health", health)  # noqa: B010
    return levels


def sweep_phases(*, levels: list[SweepLevel]) -> PhaseBlocks:
    """The levels' workload phases from their stored summaries (benchmarks.phases): the levels
    that streamed reasoning (``reasoning``), ran multi-turn sessions (``sessions``: per turn and
    per session) or ramped their rate (``ramps``), and each ramp's chart (``ramp_figures``, by
    the id of its container). A plain level is in none of them."""
    reasoning, sessions, ramps = [], [], []
    figures: dict[str, PlotlyFigure] = {}
    for level in levels:
        label = getattr(level, "label", f"C={level.concurrency}")
        row = phases_row([level.summary or {}])
        base = {"index": level.index, "label": label}
        if row["reasoning"] is not None:
            reasoning.append(base | row["reasoning"])
        if row["turns"] or row["sessions"] is not None:
            sessions.append(base | {"turns": row["turns"], "sessions": row["sessions"]})
        if row["ramp"] is not None:
            name = f"ramp-{level.index}"
            ramps.append(base | row["ramp"] | {"chart": name})
            title = f"Level {label}: {row['ramp']['strategy']} ramp per time slice"
            figures[name] = ramp_figure(title, [(str(label), row["ramp"])])
    return {"reasoning": reasoning, "sessions": sessions, "ramps": ramps, "ramp_figures": figures}


def sweep_controller_tracks(*, sweep: Sweep, levels: list[SweepLevel]) -> list[ControllerSection]:
    """Controller tracking per level of this sweep, from each level's stored per-second
    figures (``levels`` as ``sweep_level_table`` gives them, labelled)."""
    runs = [
        (
            f"sweep #{sweep.pk}",
            level.index,
            f"Level {level.index} ({getattr(level, 'label', f'C={level.concurrency}')})",
            (level.summary or {}).get("controller"),
        )
        for level in levels
    ]
    return tracks_context(runs, scope=f"sweep-{sweep.pk}")


def sweep_target_instances() -> QuerySet[ServerInstance]:
    """The instances a new sweep can target: READY ones."""
    return (
        ServerInstance.objects.filter(state=InstanceState.READY)
        .select_related("profile", "host")
        .order_by("profile__name", "pk")
    )


def sweep_target_endpoints() -> QuerySet[ServerProfile]:
    """The endpoint profiles a new sweep can target (servers specdash did not start)."""
    return ServerProfile.objects.filter(kind=ProfileKind.ENDPOINT).order_by("name")


def instance_state(*, instance_id: int) -> tuple[str, str] | None:
    """(state, reason) of a server instance, None if it no longer exists."""
    row = ServerInstance.objects.filter(pk=instance_id).values_list("state", "reason").first()
    return (str(row[0]), str(row[1])) if row is not None else None


def _epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def level_as_dict(level: SweepLevel, *, sweep: Sweep | None = None) -> LevelRow:
    """A level's figures; with its ``sweep``, where it goes on the curve's x axis (``x``: its
    offered rate in a rate sweep, else its C) and its ``label``."""
    plan = sweep_level_plan(sweep.levels, sweep.load) if sweep is not None else None
    rate_sweep = sweep is not None and is_rate_sweep(sweep.load)
    rate = _level_rate(level, plan)
    return {
        "index": level.index,
        "concurrency": level.concurrency,
        "target_rate": rate,
        "x": rate if rate_sweep and rate is not None else level.concurrency,
        "label": level_label(level.concurrency, rate, rate_sweep=rate_sweep),
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


def sweep_as_dict(sweep: Sweep) -> SweepRow:
    rate_sweep = is_rate_sweep(sweep.load)
    return {
        "id": sweep.pk,
        "state": sweep.state,
        "state_label": sweep.get_state_display(),
        "finished": sweep.is_finished,
        "levels": sweep.levels,
        "rate_sweep": rate_sweep,
        # The curve's x axis: offered request rates in a rate sweep, else concurrencies.
        "x_values": [r for _, r in sweep_level_plan(sweep.levels, sweep.load)]
        if rate_sweep
        else sweep.levels,
        "x_title": "offered request rate (req/s)" if rate_sweep else "concurrency",
        "current_level_index": sweep.current_level_index,
        "reason": sweep.reason,
        "started_at": _epoch(sweep.started_at),
        "finished_at": _epoch(sweep.finished_at),
    }


def sweep_progress(
    *, sweep: Sweep, levels: list[SweepLevel], now: float | None = None
) -> SweepProgress:
    """Level k of n and a rough time-remaining estimate (None when there is no basis yet).

    Duration-limited levels take a known time each. Request-limited ones are estimated from
    the request rate of the last finished level, which overestimates below saturation (a
    higher concurrency serves requests faster): a conservative figure for the operator.
    """
    now = time.time() if now is None else now
    total = len(sweep_level_plan(sweep.levels, sweep.load))
    finished = [lv for lv in levels if lv.state != LevelState.RUNNING]
    running = next((lv for lv in levels if lv.state == LevelState.RUNNING), None)
    current = sweep.current_level_index
    progress: SweepProgress = {
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


def sweep_snapshot(*, sweep_id: int, max_samples: int = 3600) -> SweepSnapshot | None:
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
        "levels": [level_as_dict(level, sweep=sweep) for level in levels],
        "samples": [{**s["data"], "level_index": s["level_index"], "t": s["t"]} for s in samples],
        "progress": sweep_progress(sweep=sweep, levels=levels),
    }


def sweep_filter() -> QuerySet[Sweep]:
    """Sweeps, newest first, for the API's list (its FilterSchema narrows them)."""
    return sweep_list().select_related("created_by").order_by("-created_at", "-pk")


def sweep_sample_list(*, sweep_id: int, level_index: int | None = None) -> QuerySet[SweepSample]:
    qs = SweepSample.objects.filter(sweep_id=sweep_id).order_by("t", "pk")
    return qs.filter(level_index=level_index) if level_index is not None else qs
