"""Write-side actions on sweeps.

Web requests create, cancel, resume, re-run and abandon sweeps; the ``sweep.run`` job
(benchmarks/sweeps/) records what the load generator reports through the ``sweep_*`` recording
functions of ``benchmarks.sweeps.recording`` (imported from there), and what a sweep runs
against is snapshotted by ``benchmarks.sweeps.environment``. Each change emits its event after
commit (see core.realtime for the payloads).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from benchlib.loadgen.settings import LoadSettings, LoadSettingsError
from benchmarks.sweeps import plan as level_plans
from benchmarks.sweeps import targets
from benchmarks.sweeps.environment import sweep_environment, target_model
from benchmarks.sweeps.models import LevelState, PlannedRun, Sweep, SweepLevel, SweepState
from benchmarks.sweeps.recording import broadcast_sweep_state
from benchmarks.sweeps.traces import trace_format_of
from core.jobs import job_cancel, job_enqueue
from core.jobs.health import worker_require
from core.models import JobState
from hosts.models import InstanceState, ServerInstance, ServerProfile

SWEEP_JOB_KIND = "sweep.run"
MAX_CONCURRENCY = 4096
MAX_LEVELS = 64


def sweep_lock_key(sweep_id: int) -> str:
    return f"sweep:{sweep_id}"


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
    if settings.trace and not (django_settings.SPECDASH_TRACE_DIR / settings.trace).is_file():
        raise ValidationError(
            {"trace": [f"No file {settings.trace!r} in the trace folder (SPECDASH_TRACE_DIR)."]}
        )
    if settings.trace:
        # Said now, on the format's field, rather than by the load generator's first level.
        found = trace_format_of(settings.trace)
        if found is not None and found != settings.trace_format:
            raise ValidationError(
                {
                    "trace_format": [
                        f"{settings.trace} is a {found} trace, not {settings.trace_format}."
                    ]
                }
            )
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


def _clean_tags(tags: Sequence[str]) -> list[str]:
    """Stripped, cut to 50 characters, then de-duplicated: two long tags that share their
    first 50 characters are one tag as stored. Experiments store their tags the same way."""
    out: list[str] = []
    for tag in tags:
        tag = str(tag).strip()[:50]
        if tag and tag not in out:
            out.append(tag)
    return out


def sweep_create(
    *,
    instance: ServerInstance | None = None,
    base_url: str = "",
    endpoint: ServerProfile | None = None,
    levels: Sequence[int],
    load: Mapping[str, Any] | LoadSettings,
    name: str = "",
    notes: str = "",
    tags: Sequence[str] = (),
    user: Any = None,
    require_worker: bool = True,
) -> Sweep:
    """Validate, snapshot the environment, create the sweep and queue its ``sweep.run`` job.

    The target is a READY server instance or, for servers specdash did not start, an endpoint
    profile or a base URL. An endpoint profile was registered by staff, so its URL is not
    checked against the deployment's list of sweep targets (it is normalised as any URL is);
    its API kind is the load's default.
    Raises ValidationError with errors keyed by field name, WorkerUnavailable (a
    ValidationError) while no healthy job worker is alive (``require_worker=False``: a running
    job's own step, whose worker is alive by definition).
    """
    if endpoint is not None:
        if instance is not None or base_url:
            raise ValidationError({"instance": "Choose a server or an endpoint profile, not both."})
        if not endpoint.is_endpoint:
            raise ValidationError(
                {"endpoint": f"{endpoint.name} is a managed profile: start it, sweep its server."}
            )
        if endpoint.api_kind and isinstance(load, Mapping) and not load.get("api"):
            load = {**load, "api": endpoint.api_kind}
    elif (instance is None) == (not base_url):
        raise ValidationError({"instance": "Choose a ready server (or give a base URL)."})
    if endpoint is not None:
        target_url = targets.normalised_base_url(endpoint.base_url)
    elif instance is not None:
        instance = ServerInstance.objects.select_related("profile", "host").get(pk=instance.pk)
        if instance.state != InstanceState.READY:
            raise ValidationError(
                {"instance": f"Server #{instance.pk} is {instance.state}, not ready."}
            )
        target_url = instance.base_url
    else:
        # Normalised first, then checked, then stored and used as checked (sweeps/targets.py).
        target_url = targets.base_url_check(base_url, user=user)
        try:
            URLValidator(schemes=["http", "https"])(target_url)
        except ValidationError:
            raise ValidationError({"base_url": "Enter an http(s) URL."}) from None
    cleaned_levels, cleaned_load = sweep_clean_plan(levels, load)
    model = target_model(instance, cleaned_load) or (
        endpoint.served_model_name if endpoint is not None else ""
    )
    if require_worker:
        worker_require(kind=SWEEP_JOB_KIND)
    with transaction.atomic():
        sweep = Sweep.objects.create(
            name=name.strip()[:200],
            instance=instance,
            profile=instance.profile if instance is not None else endpoint,
            base_url="" if instance is not None else target_url,
            levels=cleaned_levels,
            load=cleaned_load,
            environment=sweep_environment(
                instance=instance, base_url=target_url, model=model, endpoint=endpoint
            ),
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


def run_cancel(
    run: PlannedRun,
    *,
    user: Any,
    on_cancelled: Callable[[], None],
    on_requested: Callable[[], None] | None = None,
) -> None:
    """Cancel a sweep or an experiment through its job: a queued one at once (``on_cancelled``
    after its row says so), a running one when its job sees the request (its reason says who
    asked; ``on_requested``). Both models spell these three states the same."""
    if run.is_finished:
        return
    who = getattr(user, "username", "") or "the system"
    job_state = job_cancel(job=run.job).state if run.job is not None else JobState.CANCELLED
    # Any: ``state`` is each subclass's own field (its choices), not the abstract model's.
    rows: QuerySet[Any] = type(run)._default_manager.filter(pk=run.pk)
    with transaction.atomic():
        if job_state == JobState.CANCELLED:
            # The job never started, so nothing else will finish the run.
            updated = rows.filter(state=SweepState.QUEUED).update(
                state=SweepState.CANCELLED,
                reason=f"cancelled by {who} before it started",
                finished_at=timezone.now(),
            )
            if updated:
                on_cancelled()
        else:
            rows.filter(state=SweepState.RUNNING, reason="").update(reason=f"cancelled by {who}")
            if on_requested is not None:
                on_requested()
    run.refresh_from_db()


def sweep_cancel(*, sweep: Sweep, user: Any = None) -> Sweep:
    """Cancel a sweep: a queued one at once, a running one when its job sees the request
    (the load generator then finishes the level in progress as a partial level)."""
    run_cancel(sweep, user=user, on_cancelled=lambda: broadcast_sweep_state(sweep.pk))
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
        # The model the sweep sent (given, the profile's served name, or discovered from the
        # earlier server and kept with the sweep); else the replacement's served name, else ""
        # (the job asks the server before the first level).
        fresh = sweep_environment(
            instance=instance,
            base_url=instance.base_url,
            model=str(target.get("model") or target_model(instance, sweep.load)),
        )
        if target.get("model_source") and target.get("model"):
            fresh["target"]["model_source"] = target["model_source"]
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
    endpoint = sweep.profile if sweep.profile is not None and sweep.profile.is_endpoint else None
    if sweep.instance is None and sweep.base_url and endpoint is None:
        # A base-URL sweep is held to today's rule on every run, not the one it was created
        # under: rows made before targets were closed, or a host since removed, stop here.
        targets.base_url_check(sweep.base_url, user=user)
    worker_require(kind=SWEEP_JOB_KIND)
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
        transaction.on_commit(lambda: broadcast_sweep_state(sweep.pk))
    sweep.refresh_from_db()
    return sweep


class _RerunTarget(TypedDict, total=False):
    """Where a re-run goes (one of them): the endpoint profile, a ready server, or the URL."""

    endpoint: ServerProfile
    instance: ServerInstance
    base_url: str


def sweep_rerun(*, sweep: Sweep, user: Any = None) -> Sweep:
    """A new sweep with a finished sweep's settings (levels, load, name, notes, tags) against
    the same target: its server if still ready, else a ready server of the same profile (an
    experiment's sweep included: its server was stopped when the step ended); the same
    endpoint profile or base URL. ValidationError when the sweep has not finished or no
    server of its profile is ready (start one first)."""
    sweep.refresh_from_db()
    if not sweep.is_finished:
        raise ValidationError(
            {"state": f"this sweep is {sweep.state}: re-run it once it has finished"}
        )
    profile = sweep.profile
    target: _RerunTarget = {}
    if profile is not None and profile.is_endpoint:
        target["endpoint"] = profile
    elif sweep.instance is not None or profile is not None:
        ready = ServerInstance.objects.filter(state=InstanceState.READY, stop_requested=False)
        own = ready.filter(pk=sweep.instance_id).first() if sweep.instance_id else None
        instance = own or ready.filter(profile=profile).order_by("-ready_at").first()
        if instance is None:
            name = profile.name if profile is not None else "its profile"
            raise ValidationError(
                {"instance": f"No server of {name} is ready: start it, then re-run this sweep."}
            )
        target["instance"] = instance
    else:
        target["base_url"] = sweep.base_url
    # An experiment's own tags name its experiment and arm: a sweep run by hand is neither.
    tags = [t for t in sweep.tags if not t.startswith(("experiment:", "arm:"))]
    return sweep_create(
        **target,
        levels=list(sweep.levels),
        load=dict(sweep.load),
        name=sweep.name,
        notes=sweep.notes,
        tags=tags,
        user=user,
    )


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
        transaction.on_commit(lambda: broadcast_sweep_state(sweep.pk))
    sweep.refresh_from_db()
    return sweep
