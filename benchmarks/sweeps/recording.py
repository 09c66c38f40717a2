"""Recording what a sweep's job sees: the services the ``sweep.run`` job (and a shard's)
calls as the load generator reports (sync; the async job awaits their twins in
``benchmarks.sweeps.store``).
Each change emits its event after commit (see core.realtime for the payloads).
Callers import them from here; the sweep services that web requests call are
``benchmarks.sweeps.services``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from benchlib.loadgen.events import SampleEvent
from benchlib.loadgen.summary import Distribution, LevelSummary
from benchmarks.sweeps import plan as level_plans
from benchmarks.sweeps import selectors
from benchmarks.sweeps.attempts import earlier_attempt, unheard_attempts_record
from benchmarks.sweeps.channel import (
    SWEEP_LEVEL,
    SWEEP_SAMPLES,
    SWEEP_STATE,
    SweepLevelPayload,
    SweepStatePayload,
)
from benchmarks.sweeps.endpoints import EndpointCheck
from benchmarks.sweeps.models import (
    FINISHED_SWEEP_STATES,
    LevelState,
    Sweep,
    SweepLevel,
    SweepSample,
    SweepState,
)
from benchmarks.sweeps.rows import LevelFigures, LiveSample
from core import realtime
from hosts.models import InstanceState


def sweep_records_file(*, sweep_id: int) -> Path:
    """Where a new sweep's records go, in the format SPECDASH_RECORDS_FORMAT names (the
    compact one is told by its suffix to the load generator, and by its first bytes to every
    reader)."""
    folder = Path(settings.SPECDASH_DATA_DIR) / "sweeps" / str(sweep_id)
    # A resume appends to the file the sweep began, in its format, whatever the setting says now.
    for existing in ("records.jsonl", "records.sdrec"):
        if (folder / existing).exists():
            return folder / existing
    name = "records.sdrec" if settings.SPECDASH_RECORDS_FORMAT == "compact" else "records.jsonl"
    return folder / name


@dataclass(frozen=True)
class SweepPlan:
    """What the job needs to drive the load generator."""

    sweep_id: int
    base_url: str
    model: str
    levels: list[int]
    load: dict[str, Any]
    records_path: Path
    instance_id: int | None
    # A resumed sweep runs levels[level_offset:], still numbered as the sweep numbers them
    # (a rate sweep: one concurrency per level left, and ``load["request_rate"]`` their rates).
    level_offset: int = 0
    # Which run of this sweep this is (1 = the first); written into every record.
    attempt: int = 1
    # The profile's engine ("" for a server specdash did not start): decides which body
    # fields ask the server for each request's speculative figures.
    engine: str = ""
    # The server may run decode steps that draft nothing (``undrafted_steps``): see there.
    undrafted_steps: bool = False
    # A server specdash did not start (an endpoint profile's): where its metrics are read and
    # the readiness check the job makes before the first level and while levels run.
    metrics_url: str = ""
    endpoint_check: EndpointCheck | None = None
    # The registered host of that endpoint, if it has one: the job starts the host's telemetry
    # (GPU and host load) as an instance start does for a managed server.
    endpoint_host_id: int | None = None


def undrafted_steps(environment: Mapping[str, Any]) -> bool:
    """Whether the sweep's server runs SGLang's ``--speculative-adaptive`` (its launch argv, or
    its ``/server_info`` where it was read): its tiers can draft 0 steps (the built-in ones do
    from batch 64), which its verify-call counter counts all the same."""
    instance = environment.get("instance") or {}
    argv = [str(a) for a in instance.get("launch_argv") or []]
    info = instance.get("server_info") or {}
    return "--speculative-adaptive" in argv or info.get("speculative_adaptive") is True


def sweep_level_server_metrics_save(
    *, sweep_id: int, index: int, metrics: Mapping[str, object]
) -> bool:
    """Store a level's server-side figures (``ServerMetrics``: hosts.telemetry.levels measures
    them) and tell the sweep page its row changed; False when the level is not there."""
    with transaction.atomic():
        level = SweepLevel.objects.filter(sweep_id=sweep_id, index=index).first()
        if level is None:
            return False
        level.server_metrics = metrics
        level.save(update_fields=["server_metrics"])
        _broadcast_level(level)
    return True


def broadcast_sweep_state(sweep_id: int) -> None:
    sweep = Sweep.objects.get(pk=sweep_id)
    levels = selectors.sweep_levels(sweep_id=sweep_id)
    payload: SweepStatePayload = {
        "sweep_id": sweep_id,
        "sweep": selectors.sweep_as_dict(sweep),
        "progress": selectors.sweep_progress(sweep=sweep, levels=levels),
    }
    SWEEP_STATE.broadcast_on_commit(realtime.sweep_group(sweep_id), payload)


def _broadcast_level(level: SweepLevel) -> None:
    sweep = Sweep.objects.get(pk=level.sweep_id)
    levels = selectors.sweep_levels(sweep_id=sweep.pk)
    payload: SweepLevelPayload = {
        "sweep_id": sweep.pk,
        "level": selectors.level_as_dict(level, sweep=sweep),
        "progress": selectors.sweep_progress(sweep=sweep, levels=levels),
    }
    SWEEP_LEVEL.broadcast_on_commit(realtime.sweep_group(sweep.pk), payload)


def sweep_begin(*, sweep_id: int, resume_from: int = 0) -> SweepPlan | None:
    """Mark a queued sweep running and return its plan; None if it is no longer queued
    (cancelled meanwhile). Fails the sweep at once if its server is not ready."""
    with transaction.atomic():
        now = timezone.now()
        updated = Sweep.objects.filter(pk=sweep_id, state=SweepState.QUEUED).update(
            state=SweepState.RUNNING, started_at=now
        )
        if not updated:
            return None
        Sweep.objects.filter(pk=sweep_id).update(attempts=models.F("attempts") + 1)
        sweep = Sweep.objects.select_related("instance__host", "instance__profile", "profile").get(
            pk=sweep_id
        )
        records = sweep_records_file(sweep_id=sweep_id)
        records.parent.mkdir(parents=True, exist_ok=True)
        sweep.records_path = str(records)
        sweep.save(update_fields=["records_path"])
        broadcast_sweep_state(sweep_id)
    if sweep.attempts > 1:
        # A resume: the records an earlier run wrote of levels it never told us it started.
        for level in unheard_attempts_record(sweep):
            _broadcast_level(level)
    instance = sweep.instance
    if instance is not None and instance.state != InstanceState.READY:
        sweep_finish(
            sweep_id=sweep_id,
            state=SweepState.FAILED,
            reason=f"server #{instance.pk} is {instance.state}, not ready",
        )
        return None
    target = sweep.environment.get("target", {})
    levels, load = list(sweep.levels)[resume_from:], dict(sweep.load)
    if level_plans.is_rate_sweep(sweep.load):
        # A rate sweep resumed part way: the levels left, each with its concurrency and rate.
        left = level_plans.sweep_level_plan(sweep.levels, sweep.load)[resume_from:]
        levels = [c for c, _ in left]
        load["request_rate"] = [r for _, r in left]
    return SweepPlan(
        sweep_id=sweep_id,
        base_url=instance.base_url if instance is not None else sweep.base_url,
        model=str(target.get("model") or ""),
        levels=levels,
        load=load,
        records_path=records,
        instance_id=instance.pk if instance is not None else None,
        level_offset=resume_from,
        attempt=sweep.attempts,
        engine=_sweep_engine(sweep),
        undrafted_steps=undrafted_steps(sweep.environment or {}),
        metrics_url=str(target.get("metrics_url") or ""),
        endpoint_check=_endpoint_check(sweep),
        endpoint_host_id=selectors.sweep_endpoint_host_id(sweep=sweep),
    )


def _endpoint_check(sweep: Sweep) -> EndpointCheck | None:
    profile = sweep.profile
    if sweep.instance is not None or profile is None or not profile.is_endpoint:
        return None
    path = "/" + profile.readiness_path.lstrip("/") if profile.readiness_path else ""
    return EndpointCheck(url=sweep.base_url.rstrip("/") + path, status=profile.readiness_status)


def sweep_model_discovered(*, sweep_id: int, model: str) -> None:
    """Keep the model name the server gave (/v1/models) as the sweep's target model, so that
    a resume (on this server or on a replacement) sends the same name without asking again."""
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().get(pk=sweep_id)
        env = dict(sweep.environment)
        env["target"] = {**env.get("target", {}), "model": model, "model_source": "discovered"}
        sweep.environment = env
        sweep.save(update_fields=["environment"])


def _sweep_engine(sweep: Sweep) -> str:
    if sweep.instance is not None:
        return str(sweep.instance.profile.engine)
    return str(sweep.profile.engine) if sweep.profile is not None else ""


def _from_epoch(t: Any) -> datetime:
    if isinstance(t, int | float) and math.isfinite(t):
        return datetime.fromtimestamp(t, tz=UTC)
    return timezone.now()


def sweep_level_started(*, sweep_id: int, index: int, concurrency: int, t: float) -> None:
    """A level begins; a row left by an earlier attempt (a partial level) moves into
    ``earlier_attempts`` and the row now stands for this attempt."""
    with transaction.atomic():
        attempt = Sweep.objects.filter(pk=sweep_id).values_list("attempts", flat=True).first()
        attempt = max(1, attempt or 0)
        level = (
            SweepLevel.objects.select_for_update().filter(sweep_id=sweep_id, index=index).first()
        )
        if level is None:
            level = SweepLevel(sweep_id=sweep_id, index=index, attempt=attempt)
        elif level.attempt != attempt:
            level.earlier_attempts = [*level.earlier_attempts, earlier_attempt(level)]
            # A level not yet run again: the columns an empty summary gives (every figure is
            # read with .get, so they come out empty).
            for name, value in level_fields_from_summary(cast(LevelSummary, {})).items():
                setattr(level, name, value)
            level.server_metrics = {}
            level.finished_at = None
            level.attempt = attempt
        level.concurrency = concurrency
        level.state = LevelState.RUNNING
        level.started_at = _from_epoch(t)
        level.save()
        Sweep.objects.filter(pk=sweep_id).update(current_level_index=index)
        _broadcast_level(level)


def _dist(distribution: Distribution | None, key: Literal["p50", "p99"]) -> float | None:
    value = distribution.get(key) if distribution else None
    return float(value) if isinstance(value, int | float) else None


class LevelColumns(LevelFigures):
    """``level_fields_from_summary``: the level's C, state and headline figures and the
    summary they were read from, as the SweepLevel columns of those names store them."""

    concurrency: int
    state: str
    summary: LevelSummary


def level_fields_from_summary(summary: LevelSummary) -> LevelColumns:
    """The SweepLevel columns a load-generator level summary fills in."""
    status = summary.get("status")
    if status == "completed" and not summary.get("partial"):
        state = LevelState.COMPLETED
    elif status == "failed":
        state = LevelState.FAILED
    else:
        state = LevelState.PARTIAL
    requests = summary.get("requests") or {}
    steady = summary.get("steady") or {}
    return {
        "concurrency": int(summary.get("concurrency") or 0),
        "state": state,
        "summary": summary,
        "output_tok_s": summary.get("output_tok_s"),
        "steady_output_tok_s": steady.get("output_tok_s"),
        "ttft_p50_ms": _dist(summary.get("ttft_ms"), "p50"),
        "ttft_p99_ms": _dist(summary.get("ttft_ms"), "p99"),
        "tpot_p50_ms": _dist(summary.get("tpot_ms"), "p50"),
        "itl_p50_ms": _dist(summary.get("itl_ms"), "p50"),
        "itl_p99_ms": _dist(summary.get("itl_ms"), "p99"),
        "e2e_p50_ms": _dist(summary.get("e2e_ms"), "p50"),
        "achieved_concurrency": summary.get("achieved_concurrency"),
        "requests_ok": int(requests.get("ok") or 0),
        "requests_failed": int(requests.get("failed") or 0),
        "reason": str(summary.get("reason") or "") if state != LevelState.COMPLETED else "",
    }


def sweep_level_finished(*, sweep_id: int, summary: LevelSummary) -> SweepLevel:
    """Persist a level summary (denormalised headline columns + the full summary)."""
    index = int(summary["level_index"])
    fields = level_fields_from_summary(summary)
    with transaction.atomic():
        level = SweepLevel.objects.filter(sweep_id=sweep_id, index=index).first()
        if level is None:
            attempt = Sweep.objects.filter(pk=sweep_id).values_list("attempts", flat=True).first()
            level = SweepLevel(
                sweep_id=sweep_id,
                index=index,
                started_at=timezone.now(),
                attempt=max(1, attempt or 0),
            )
        for name, value in fields.items():
            setattr(level, name, value)
        level.finished_at = timezone.now()
        level.save()
        _broadcast_level(level)
    return level


_SAMPLE_META = {"event", "level_index", "t"}


def sweep_samples_add(*, sweep_id: int, samples: Sequence[SampleEvent]) -> None:
    """Store one batch of live samples and send it as one event."""
    if not samples:
        return
    rows = [
        SweepSample(
            sweep_id=sweep_id,
            level_index=int(s.get("level_index") or 0),
            t=float(s.get("t") or 0.0),
            data={k: v for k, v in s.items() if k not in _SAMPLE_META},
        )
        for s in samples
    ]
    with transaction.atomic():
        SweepSample.objects.bulk_create(rows)
        # The sample events' figures (SampleFigures) as stored, with their level and time: a
        # LiveSample, read back from the JSON field; the channel payload test checks what goes out.
        payload = [
            cast(LiveSample, {**row.data, "level_index": row.level_index, "t": row.t})
            for row in rows
        ]
        SWEEP_SAMPLES.broadcast_on_commit(
            realtime.sweep_group(sweep_id), {"sweep_id": sweep_id, "samples": payload}
        )


# Request failures a server that died causes: refused connections, streams cut off.
CRASH_ERROR_KINDS = ("connect", "disconnect", "protocol")


def sweep_levels_cut_by_crash(*, sweep_id: int, from_index: int = 0) -> list[int]:
    """After the server crashed mid-sweep: a level the load generator finished with requests
    lost to the dead server is partial, not completed (comparisons count completed levels
    only); one it gave up on stays failed. Either way its reason names the crash, with what
    the load generator saw after it. Returns the indexes changed."""
    changed = []
    with transaction.atomic():
        levels = SweepLevel.objects.select_for_update().filter(
            sweep_id=sweep_id,
            index__gte=from_index,
            state__in=[LevelState.COMPLETED, LevelState.FAILED],
        )
        for level in levels:
            causes = ((level.summary or {}).get("requests") or {}).get("errors_by_cause") or {}
            lost = {k: int(causes[k]) for k in CRASH_ERROR_KINDS if causes.get(k)}
            if not lost:
                continue
            seen = f" (load generator: {level.reason})" if level.reason else ""
            if level.state == LevelState.COMPLETED:
                level.state = LevelState.PARTIAL
            level.reason = (
                "server crashed during this level: "
                + ", ".join(f"{n} {kind} error(s)" for kind, n in lost.items())
                + seen
            )
            level.save(update_fields=["state", "reason"])
            _broadcast_level(level)
            changed.append(level.index)
    return changed


def sweep_finish(*, sweep_id: int, state: str, reason: str = "") -> bool:
    """End a sweep (completed, cancelled, failed, interrupted); a level still running
    becomes partial with the same reason. False if the sweep had already ended."""
    if state not in FINISHED_SWEEP_STATES:
        raise ValueError(f"{state!r} is not a final sweep state")
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().filter(pk=sweep_id).first()
        if sweep is None or sweep.is_finished:
            return False
        now = timezone.now()
        sweep.state = state
        # A reason recorded earlier (who cancelled) is more specific than a generic one.
        sweep.reason = sweep.reason if (sweep.reason and state == SweepState.CANCELLED) else reason
        sweep.finished_at = now
        sweep.save(update_fields=["state", "reason", "finished_at"])
        for level in SweepLevel.objects.filter(sweep_id=sweep_id, state=LevelState.RUNNING):
            level.state = LevelState.PARTIAL
            level.reason = level.reason or reason
            level.finished_at = now
            level.save(update_fields=["state", "reason", "finished_at"])
            _broadcast_level(level)
        broadcast_sweep_state(sweep_id)
    return True
