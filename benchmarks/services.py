"""Write-side actions on sweeps.

Web requests create and cancel sweeps; the ``sweep.run`` job (benchmarks/sweeps/) records
what the load generator reports through the ``sweep_*`` recording functions below. Each
change emits its event after commit (see specdash.realtime for the payloads).
"""

from __future__ import annotations

import math
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import models, transaction
from django.utils import timezone

from benchmarks import selectors
from benchmarks.loadgen.settings import APIS as APIS  # the form's choices
from benchmarks.loadgen.settings import LoadSettings, LoadSettingsError
from benchmarks.models import LevelState, Sweep, SweepLevel, SweepSample, SweepState
from benchmarks.models.sweeps import FINISHED_SWEEP_STATES
from benchmarks.sweeps import plan as level_plans
from hosts.jobs import job_cancel, job_enqueue
from hosts.masking import masked_env
from hosts.models import InstanceState, JobState, ServerInstance
from specdash import realtime

SWEEP_JOB_KIND = "sweep.run"
MAX_CONCURRENCY = 4096
MAX_LEVELS = 64


def sweep_lock_key(sweep_id: int) -> str:
    return f"sweep:{sweep_id}"


def sweep_records_file(*, sweep_id: int) -> Path:
    return Path(settings.SPECDASH_DATA_DIR) / "sweeps" / str(sweep_id) / "records.jsonl"


def sweep_clean_levels(levels: Sequence[Any]) -> list[int]:
    """Positive integer concurrencies up to MAX_CONCURRENCY, duplicates dropped, order kept."""
    cleaned: list[int] = []
    for value in levels:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError({"levels": f"{value!r} is not a whole number."})
        if not 1 <= value <= MAX_CONCURRENCY:
            raise ValidationError(
                {"levels": f"Concurrency {value} is outside 1 to {MAX_CONCURRENCY}."}
            )
        if value not in cleaned:
            cleaned.append(value)
    if not cleaned:
        raise ValidationError({"levels": "Give at least one concurrency level."})
    if len(cleaned) > MAX_LEVELS:
        raise ValidationError({"levels": f"At most {MAX_LEVELS} levels per sweep."})
    return cleaned


def sweep_clean_load(load: Mapping[str, Any] | LoadSettings) -> dict[str, Any]:
    """Validated load-generator settings with defaults filled in (unknown keys refused), in
    the form a sweep stores (``LoadSettings.to_stored``)."""
    if isinstance(load, LoadSettings):
        load = load.to_stored()
    try:
        settings = LoadSettings.clean(load)
    except LoadSettingsError as exc:
        if exc.message:
            raise ValidationError(exc.message) from None
        raise ValidationError(exc.errors) from None
    return settings.to_stored()


def sweep_clean_plan(
    levels: Sequence[Any], load: Mapping[str, Any] | LoadSettings
) -> tuple[list[int], dict[str, Any]]:
    """Levels and load settings cleaned together (a rate sweep takes one concurrency cap);
    every error of both, keyed by field, in one ValidationError."""
    errors: dict[str, list[str]] = {}
    cleaned_levels: list[int] = []
    cleaned_load: dict[str, Any] = {}
    try:
        cleaned_levels = sweep_clean_levels(levels)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    try:
        cleaned_load = sweep_clean_load(load)
    except ValidationError as exc:
        if hasattr(exc, "error_dict"):
            errors.update(exc.message_dict)
        else:
            errors.setdefault("__all__", []).extend(exc.messages)
    if not errors:
        try:
            level_plans.check_levels_with_rates(cleaned_levels, cleaned_load)
            if len(level_plans.sweep_level_plan(cleaned_levels, cleaned_load)) > MAX_LEVELS:
                raise ValidationError(
                    {"request_rate": f"At most {MAX_LEVELS} levels (request rates) per sweep."}
                )
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    return cleaned_levels, cleaned_load


def _masked_env(env: dict[str, Any]) -> dict[str, Any]:
    # Secret values are not copied into a sweep's environment snapshot.
    return masked_env(env)


def sweep_environment(
    *, instance: ServerInstance | None, base_url: str, model: str
) -> dict[str, Any]:
    """What makes a run comparable, frozen at creation: the server's launch and the client."""
    env: dict[str, Any] = {
        "target": {"base_url": base_url, "model": model},
        "client": {"python": platform.python_version(), "executable": sys.executable},
        "dashboard_host": platform.node(),
    }
    if instance is not None:
        profile = instance.profile
        env["instance"] = {
            "id": instance.pk,
            "run_id": instance.run_id,
            "host": instance.host.name,
            "port": instance.port,
            "launch_argv": list(instance.launch_argv),
            "env": _masked_env(dict(instance.env)),
            "gpu_ids": list(instance.gpu_ids),
            "server_info": dict(instance.server_info),
            "ready_at": instance.ready_at.isoformat() if instance.ready_at else None,
        }
        env["profile"] = {
            "id": profile.pk,
            "name": profile.name,
            "engine": profile.engine,
            "speculative": profile.speculative,
            "served_model_name": profile.served_model_name,
            "tags": list(profile.tags),
        }
    return env


def _target_model(instance: ServerInstance | None, load: dict[str, Any]) -> str:
    if load["model"]:
        return str(load["model"])
    if instance is not None:
        served = instance.profile.served_model_name or instance.server_info.get(
            "served_model_name", ""
        )
        if served:
            return str(served)
    return ""  # not known: the sweep job asks the server (/v1/models) before the first level


def _clean_tags(tags: Sequence[str]) -> list[str]:
    """Stripped, cut to 50 characters, then de-duplicated: two long tags that share their
    first 50 characters are one tag as stored. Experiments store their tags the same way."""
    out: list[str] = []
    for tag in tags:
        tag = str(tag).strip()[:50]
        if tag and tag not in out:
            out.append(tag)
    return out


def _origin_and_path(url: str) -> tuple[str, str, int, str] | None:
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    except ValueError:
        return None
    return parts.scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/") + "/"


def base_url_allowed(url: str) -> bool:
    """Whether a sweep may target ``url`` (one not started by specdash): any URL unless
    ``SPECDASH_SWEEP_BASE_URLS`` lists prefixes, as a shared deployment should, so the load
    generator cannot be aimed at arbitrary addresses on the workers' network."""
    prefixes = settings.SPECDASH_SWEEP_BASE_URLS
    if not prefixes:
        return True
    target = _origin_and_path(url)
    if target is None:
        return False
    for prefix in prefixes:
        allowed = _origin_and_path(prefix)
        if allowed is not None and target[:3] == allowed[:3] and target[3].startswith(allowed[3]):
            return True
    return False


def sweep_create(
    *,
    instance: ServerInstance | None = None,
    base_url: str = "",
    levels: Sequence[int],
    load: Mapping[str, Any] | LoadSettings,
    name: str = "",
    notes: str = "",
    tags: Sequence[str] = (),
    user: Any = None,
) -> Sweep:
    """Validate, snapshot the environment, create the sweep and queue its ``sweep.run`` job.

    The target is a READY server instance or, for servers specdash did not start, a base URL.
    Raises ValidationError with errors keyed by field name.
    """
    if (instance is None) == (not base_url):
        raise ValidationError({"instance": "Choose a ready server (or give a base URL)."})
    if instance is not None:
        instance = ServerInstance.objects.select_related("profile", "host").get(pk=instance.pk)
        if instance.state != InstanceState.READY:
            raise ValidationError(
                {"instance": f"Server #{instance.pk} is {instance.state}, not ready."}
            )
        target_url = instance.base_url
    else:
        try:
            URLValidator(schemes=["http", "https"])(base_url)
        except ValidationError:
            raise ValidationError({"base_url": "Enter an http(s) URL."}) from None
        if not base_url_allowed(base_url):
            allowed = ", ".join(settings.SPECDASH_SWEEP_BASE_URLS)
            raise ValidationError(
                {"base_url": f"This deployment runs sweeps only against {allowed}."}
            )
        target_url = base_url.rstrip("/")
    cleaned_levels, cleaned_load = sweep_clean_plan(levels, load)
    model = _target_model(instance, cleaned_load)
    with transaction.atomic():
        sweep = Sweep.objects.create(
            name=name.strip()[:200],
            instance=instance,
            profile=instance.profile if instance is not None else None,
            base_url="" if instance is not None else target_url,
            levels=cleaned_levels,
            load=cleaned_load,
            environment=sweep_environment(instance=instance, base_url=target_url, model=model),
            notes=notes,
            tags=_clean_tags(tags),
            created_by=user if user is not None and user.is_authenticated else None,
        )
        sweep.job = job_enqueue(
            kind=SWEEP_JOB_KIND,
            params={"sweep_id": sweep.pk},
            lock_key=sweep_lock_key(sweep.pk),
            user=user,
        )
        sweep.save(update_fields=["job"])
    return sweep


def sweep_cancel(*, sweep: Sweep, user: Any = None) -> Sweep:
    """Cancel a sweep: a queued one at once, a running one when its job sees the request
    (the load generator then finishes the level in progress as a partial level)."""
    if sweep.is_finished:
        return sweep
    who = getattr(user, "username", "") or "the system"
    job_state = job_cancel(job=sweep.job).state if sweep.job is not None else JobState.CANCELLED
    with transaction.atomic():
        if job_state == JobState.CANCELLED:
            # The job never started, so nothing else will finish the sweep.
            updated = Sweep.objects.filter(pk=sweep.pk, state=SweepState.QUEUED).update(
                state=SweepState.CANCELLED,
                reason=f"cancelled by {who} before it started",
                finished_at=timezone.now(),
            )
            if updated:
                _broadcast_state(sweep.pk)
        else:
            Sweep.objects.filter(pk=sweep.pk, state=SweepState.RUNNING, reason="").update(
                reason=f"cancelled by {who}"
            )
    sweep.refresh_from_db()
    return sweep


def sweep_resume(
    *, sweep: Sweep, user: Any = None, instance: ServerInstance | None = None
) -> Sweep:
    """Continue an interrupted sweep from its first level that did not complete: completed
    levels are kept as they are; the cut level is measured again from its start (its
    records are appended under the new attempt; the earlier attempt's stay).

    ``instance``: a READY server that replaces the sweep's own (an experiment whose server
    did not survive); the sweep's environment then keeps the earlier server's snapshot in
    ``earlier_instances``."""
    sweep.refresh_from_db()
    if instance is not None and instance.pk != sweep.instance_id:
        instance = ServerInstance.objects.select_related("profile", "host").get(pk=instance.pk)
        if instance.state != InstanceState.READY:
            raise ValidationError({"instance": f"server #{instance.pk} is {instance.state}"})
        env = dict(sweep.environment)
        earlier = [*env.get("earlier_instances", []), env.get("instance")]
        target = env.get("target", {})
        fresh = sweep_environment(
            instance=instance,
            base_url=instance.base_url,
            model=str(target.get("model") or "default"),
        )
        sweep.environment = {**env, **fresh, "earlier_instances": earlier}
        sweep.instance = instance
        sweep.save(update_fields=["environment", "instance"])
    if sweep.state != SweepState.INTERRUPTED:
        raise ValidationError(
            {"state": f"only an interrupted sweep can be resumed (this one is {sweep.state})"}
        )
    completed = set(
        SweepLevel.objects.filter(sweep=sweep, state=LevelState.COMPLETED).values_list(
            "index", flat=True
        )
    )
    plan = level_plans.sweep_level_plan(sweep.levels, sweep.load)
    resume_from = next((i for i in range(len(plan)) if i not in completed), None)
    if resume_from is None:
        raise ValidationError({"state": "every level of this sweep completed: nothing to resume"})
    if sweep.instance is not None and sweep.instance.state != InstanceState.READY:
        raise ValidationError(
            {"instance": f"server #{sweep.instance.pk} is {sweep.instance.state}, not ready"}
        )
    who = getattr(user, "username", "") or "the system"
    label = _level_label(sweep, plan, resume_from)
    with transaction.atomic():
        updated = Sweep.objects.filter(pk=sweep.pk, state=SweepState.INTERRUPTED).update(
            state=SweepState.QUEUED,
            reason=f"resumed by {who} from level {resume_from + 1} ({label})",
            finished_at=None,
        )
        if not updated:
            raise ValidationError({"state": "the sweep changed meanwhile; reload and retry"})
        job = job_enqueue(
            kind=SWEEP_JOB_KIND,
            params={"sweep_id": sweep.pk, "resume_from": resume_from},
            lock_key=sweep_lock_key(sweep.pk),
            user=user,
        )
        Sweep.objects.filter(pk=sweep.pk).update(job=job)
        transaction.on_commit(lambda: _broadcast_state(sweep.pk))
    sweep.refresh_from_db()
    return sweep


def _level_label(sweep: Sweep, plan: level_plans.LevelPlan, index: int) -> str:
    concurrency, rate = plan[index]
    rate_sweep = level_plans.is_rate_sweep(sweep.load)
    return level_plans.level_label(concurrency, rate, rate_sweep=rate_sweep)


def sweep_abandon(*, sweep: Sweep, user: Any = None) -> Sweep:
    """Close an interrupted sweep for good: it becomes cancelled, every level kept."""
    sweep.refresh_from_db()
    if sweep.state != SweepState.INTERRUPTED:
        raise ValidationError(
            {"state": f"only an interrupted sweep can be abandoned (this one is {sweep.state})"}
        )
    who = getattr(user, "username", "") or "the system"
    with transaction.atomic():
        Sweep.objects.filter(pk=sweep.pk, state=SweepState.INTERRUPTED).update(
            state=SweepState.CANCELLED, reason=f"abandoned by {who} after: {sweep.reason}"
        )
        transaction.on_commit(lambda: _broadcast_state(sweep.pk))
    sweep.refresh_from_db()
    return sweep


# -- recording what the job sees (sync; the async job calls these through sync_to_async) --


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


def _broadcast_state(sweep_id: int) -> None:
    sweep = Sweep.objects.get(pk=sweep_id)
    realtime.sweep_broadcast_on_commit(
        sweep_id, realtime.SWEEP_STATE, selectors.sweep_state_payload(sweep=sweep)
    )


def _broadcast_level(level: SweepLevel) -> None:
    sweep = Sweep.objects.get(pk=level.sweep_id)
    levels = selectors.sweep_levels(sweep_id=sweep.pk)
    payload = {
        "level": selectors.level_as_dict(level, sweep=sweep),
        "progress": selectors.sweep_progress(sweep=sweep, levels=levels),
    }
    realtime.sweep_broadcast_on_commit(sweep.pk, realtime.SWEEP_LEVEL, payload)


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
        _broadcast_state(sweep_id)
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
    )


def _sweep_engine(sweep: Sweep) -> str:
    if sweep.instance is not None:
        return str(sweep.instance.profile.engine)
    return str(sweep.profile.engine) if sweep.profile is not None else ""


def _from_epoch(t: Any) -> datetime:
    if isinstance(t, int | float) and math.isfinite(t):
        return datetime.fromtimestamp(t, tz=UTC)
    return timezone.now()


def _earlier_attempt(level: SweepLevel) -> dict[str, Any]:
    """What a level's row held before the level was run again: kept beside the new run."""
    return {
        "attempt": level.attempt,
        "state": level.state,
        "reason": level.reason,
        "requests_ok": level.requests_ok,
        "requests_failed": level.requests_failed,
        "output_tok_s": level.output_tok_s,
        "summary": level.summary,
        "server_metrics": level.server_metrics,
        "started_at": level.started_at.isoformat() if level.started_at else None,
        "finished_at": level.finished_at.isoformat() if level.finished_at else None,
    }


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
            level.earlier_attempts = [*level.earlier_attempts, _earlier_attempt(level)]
            for name, value in level_fields_from_summary({}).items():
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


def _dist(summary: dict[str, Any], name: str, key: str) -> float | None:
    value = (summary.get(name) or {}).get(key)
    return float(value) if isinstance(value, int | float) else None


def level_fields_from_summary(summary: dict[str, Any]) -> dict[str, Any]:
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
        "ttft_p50_ms": _dist(summary, "ttft_ms", "p50"),
        "ttft_p99_ms": _dist(summary, "ttft_ms", "p99"),
        "tpot_p50_ms": _dist(summary, "tpot_ms", "p50"),
        "itl_p50_ms": _dist(summary, "itl_ms", "p50"),
        "itl_p99_ms": _dist(summary, "itl_ms", "p99"),
        "e2e_p50_ms": _dist(summary, "e2e_ms", "p50"),
        "achieved_concurrency": summary.get("achieved_concurrency"),
        "requests_ok": int(requests.get("ok") or 0),
        "requests_failed": int(requests.get("failed") or 0),
        "reason": str(summary.get("reason") or "") if state != LevelState.COMPLETED else "",
    }


def sweep_level_finished(*, sweep_id: int, summary: dict[str, Any]) -> SweepLevel:
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


def sweep_samples_add(*, sweep_id: int, samples: Sequence[dict[str, Any]]) -> None:
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
        payload = [{**row.data, "level_index": row.level_index, "t": row.t} for row in rows]
        realtime.sweep_broadcast_on_commit(sweep_id, realtime.SWEEP_SAMPLES, {"samples": payload})


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
        _broadcast_state(sweep_id)
    return True
