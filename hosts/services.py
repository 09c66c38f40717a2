"""Write-side actions on server instances. Each records who did it and emits the event
after commit; the slow work happens in a background job, never in the request."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar, Unpack

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from benchlib.json_types import JsonObject
from core import realtime
from core.jobs import job_enqueue
from core.jobs.health import worker_require
from hosts import presets, selectors
from hosts.channel import INSTANCE_EVENT, INSTANCE_STATE
from hosts.instance_fields import InstanceFields
from hosts.lifecycle.probe import ProbeReport, host_probe
from hosts.masking import MASK, masked_text, masked_tree, unmask_argv, unmask_env
from hosts.models import (
    GpuClaim,
    Host,
    InstanceEvent,
    InstanceState,
    ServerInstance,
    ServerProfile,
)
from hosts.models.instances import HOLDING_STATES, RELEASING_STATES, TERMINAL_STATES, TRANSITIONS

# The acting user (or None for the system): any object with ``is_authenticated``.
User = Any


class ServerConflict(Exception):
    """The port or a GPU is already held by another instance on the same host."""

    def __init__(self, message: str, *, holder_id: int | None = None) -> None:
        super().__init__(message)
        # The instance holding the port, so a caller can offer to stop it.
        self.holder_id = holder_id


class InvalidTransition(Exception):
    pass


def _actor(user: User) -> Any:
    return user if user is not None and user.is_authenticated else None


def host_test_connection(*, host: Host, user: Any) -> ProbeReport:
    """Test connection to a host (the admin action's probe, with a hint per failure class),
    for a user who may change hosts: it runs commands on the host as the dashboard."""
    if not user.has_perm("hosts.change_host"):
        raise PermissionDenied("Testing a connection needs the right to change hosts.")
    return host_probe(host=host)


def profile_kind_switch_check(*, profile: ServerProfile, kind: str) -> None:
    """Refuse to switch the Kind of a saved profile while one of its instances still holds
    its host's port and GPUs (anything but stopped, failed, crashed or lost): a managed
    server that became an endpoint could no longer be stopped from the dashboard, nor
    an endpoint's fields describe a process specdash is running. The message names the
    instance to stop first. Called by every interface that edits a profile (admin, API)."""
    if profile.pk is None:
        return
    stored = ServerProfile.objects.filter(pk=profile.pk).values_list("kind", flat=True).first()
    if stored is None or stored == kind:
        return
    holder = (
        ServerInstance.objects.filter(profile_id=profile.pk, state__in=sorted(HOLDING_STATES))
        .select_related("host")
        .order_by("pk")
        .first()
    )
    if holder is None:
        return
    raise ValidationError(
        {
            "kind": (
                f"The Kind cannot change while instance #{holder.pk} of this profile is "
                f"{holder.get_state_display().lower()} on {holder.host.name}: stop it first, "
                "then switch the Kind."
            )
        }
    )


def instance_lock_key(instance_id: int) -> str:
    return f"instance:{instance_id}"


def instance_record_event(
    *,
    instance: ServerInstance,
    message: str,
    kind: str = InstanceEvent.Kind.INFO,
    state: str = "",
    user: User = None,
    data: JsonObject | None = None,
) -> InstanceEvent:
    event = InstanceEvent.objects.create(
        instance=instance,
        kind=kind,
        state=state,
        # Events reach viewers (page, API, websocket): a launch line or a process's command
        # line in them must not carry a secret.
        message=masked_text(message),
        actor=_actor(user),
        data=masked_tree(data or {}),
    )
    INSTANCE_EVENT.broadcast_on_commit(
        realtime.instance_group(instance.pk), selectors.event_as_dict(event)
    )
    return event


def instance_start(
    *, profile: ServerProfile, user: User = None, require_worker: bool = True
) -> ServerInstance:
    """Create an instance in ``starting`` and queue its lifecycle job.

    The port and GPUs are claimed in the same transaction; a concurrent start on the same
    port or GPUs loses at the database's unique constraints and gets ServerConflict.
    Refused with WorkerUnavailable while no healthy job worker is alive to run it
    (``require_worker=False``: a running job's own step, whose worker is alive by definition).
    """
    if profile.is_endpoint or profile.host is None:
        # Its process is someone else's: starting one would launch nothing and claim a port
        # specdash does not own.
        raise ServerConflict(
            f"{profile.name} is an endpoint profile: its server runs outside specdash, which "
            "measures it but never starts or stops it."
        )
    host = profile.host
    if require_worker:
        worker_require(kind="server.run")
    try:
        with transaction.atomic():
            instance = ServerInstance.objects.create(
                profile=profile,
                host=host,
                port=profile.port,
                gpu_ids=list(profile.gpu_ids),
                state=InstanceState.STARTING,
                run_id=f"sd-{uuid.uuid4().hex[:16]}",
                # `{api_host}` becomes the address the dashboard connects to (hosts.presets).
                launch_argv=presets.expand_argv(profile.launch_argv, profile),
                env=dict(profile.env),
                started_by=_actor(user),
            )
            GpuClaim.objects.bulk_create(
                [GpuClaim(host=host, gpu_index=g, instance=instance) for g in profile.gpu_ids]
            )
            instance_record_event(
                instance=instance,
                kind=InstanceEvent.Kind.ACTION,
                state=InstanceState.STARTING,
                message="Start requested",
                user=user,
            )
            job_enqueue(
                kind="server.run",
                params={"instance_id": instance.pk},
                lock_key=instance_lock_key(instance.pk),
                user=user,
            )
    except IntegrityError as exc:
        holder = (
            ServerInstance.objects.filter(host=host, state__in=sorted(HOLDING_STATES))
            .filter(port=profile.port)
            .first()
        )
        if holder is not None:
            raise ServerConflict(
                f"Port {profile.port} on {profile.host} is held by instance #{holder.pk} "
                f"({holder.profile}, {holder.state}).",
                holder_id=holder.pk,
            ) from exc
        busy = GpuClaim.objects.filter(host=host, gpu_index__in=profile.gpu_ids).select_related(
            "instance__profile"
        )
        detail = ", ".join(
            f"GPU {c.gpu_index} by #{c.instance_id} ({c.instance.profile})" for c in busy
        )
        raise ServerConflict(
            f"GPUs already held on {profile.host}: {detail or 'unknown'}."
        ) from exc
    return instance


def instance_stop(*, instance: ServerInstance, user: User = None) -> ServerInstance:
    """Ask for a targeted, verified stop. The job that owns the instance performs it; an
    instance without a live owner (lost, dirty, crashed) gets a stop job of its own."""
    with transaction.atomic():
        instance = ServerInstance.objects.select_for_update().get(pk=instance.pk)
        if instance.state == InstanceState.STOPPED:
            return instance
        instance.stop_requested = True
        instance.save(update_fields=["stop_requested", "updated_at"])
        instance_record_event(
            instance=instance, kind=InstanceEvent.Kind.ACTION, message="Stop requested", user=user
        )
        if instance.state not in {
            InstanceState.STARTING,
            InstanceState.LOADING,
            InstanceState.READY,
        }:
            job_enqueue(
                kind="server.stop",
                params={"instance_id": instance.pk},
                lock_key=instance_lock_key(instance.pk),
                user=user,
            )
    return instance


class KillRefused(Exception):
    """A kill of GPU holders that is not a confirmed choice among the listed holders."""


class KillNotConfirmed(KillRefused):
    pass


class HoldersNotListed(KillRefused):
    """A holder the instance's verification did not list (by pid and start time), or none."""


def _holder_key(holder: dict[str, Any]) -> tuple[Any, Any]:
    return holder.get("pid"), holder.get("start_time")


def holders_listed(
    *, instance: ServerInstance, holders: list[dict[str, int]]
) -> list[dict[str, int]]:
    """The given holders that the instance's verification listed, matched by pid and start
    time (a pid alone may have been reused by an unrelated process since)."""
    listed = {_holder_key(h) for h in instance.evidence.get("holders", [])}
    keys = [_holder_key(h) for h in holders]
    return [{"pid": pid, "start_time": start} for pid, start in keys if (pid, start) in listed]


def instance_kill_holders(
    *,
    instance: ServerInstance,
    holders: list[dict[str, int]],
    confirmed: bool,
    user: User = None,
) -> ServerInstance:
    """Operator-confirmed kill of exactly the listed GPU holders of a dirty instance.

    The rule is kept here, not in the interfaces, so that no caller can kill a process the
    verification did not list: KillNotConfirmed without the operator's confirmation,
    HoldersNotListed when any holder is not in the instance's evidence (or none is given),
    InvalidTransition unless the instance is dirty. Nothing is queued when it refuses."""
    if not confirmed:
        raise KillNotConfirmed("Confirm the kill of the listed holders.")
    with transaction.atomic():
        # Locked and read afresh: the evidence checked is the evidence at the time of the kill,
        # not a copy the caller loaded before a re-verification replaced it.
        instance = ServerInstance.objects.select_for_update().get(pk=instance.pk)
        chosen = holders_listed(instance=instance, holders=holders)
        if not chosen or len(chosen) != len(holders):
            raise HoldersNotListed("Only holders listed in the evidence can be killed.")
        if instance.state != InstanceState.DIRTY:
            raise InvalidTransition("Only a dirty instance's GPU holders can be killed.")
        instance_record_event(
            instance=instance,
            kind=InstanceEvent.Kind.ACTION,
            message=f"Kill of {len(chosen)} listed GPU holder(s) confirmed",
            user=user,
            data={"holders": chosen},
        )
        job_enqueue(
            kind="server.kill_holders",
            params={"instance_id": instance.pk, "holders": chosen},
            lock_key=instance_lock_key(instance.pk),
            user=user,
        )
    return instance


def instance_transition(
    *,
    instance_id: int,
    state: str,
    message: str = "",
    release_claims: bool | None = None,
    **fields: Unpack[InstanceFields],
) -> ServerInstance:
    """Move an instance to ``state`` (validated against the state machine), persist the
    given fields, record the history event and release port/GPU claims when terminal."""
    with transaction.atomic():
        instance = ServerInstance.objects.select_for_update().get(pk=instance_id)
        if state != instance.state and state not in TRANSITIONS[instance.state]:
            raise InvalidTransition(f"{instance.state} -> {state} is not allowed")
        previous = instance.state
        instance.state = state
        for name, value in fields.items():
            setattr(instance, name, value)
        now = timezone.now()
        if state == InstanceState.READY and instance.ready_at is None:
            instance.ready_at = now
        if state in TERMINAL_STATES and instance.stopped_at is None:
            instance.stopped_at = now
        instance.save()
        if release_claims if release_claims is not None else state in RELEASING_STATES:
            GpuClaim.objects.filter(instance=instance).delete()
        if state != previous or message:
            instance_record_event(
                instance=instance, kind=InstanceEvent.Kind.STATE, state=state, message=message
            )
        INSTANCE_STATE.broadcast_on_commit(
            realtime.instance_group(instance.pk), {"instance": selectors.instance_as_dict(instance)}
        )
    return instance


def instance_begin_cleanup(*, instance_id: int, message: str) -> tuple[str, list[int]]:
    """Start a verified clean-up stop of an instance that already ended (failed, crashed,
    lost): like any stop it holds the port and its still-free GPUs while it stops. When
    another instance holds the port by now, the instance stays where it is. Returns who
    holds the port ("" when it was taken back) and the GPUs other instances hold."""
    instance = ServerInstance.objects.get(pk=instance_id)
    others = sorted(
        GpuClaim.objects.filter(host_id=instance.host_id, gpu_index__in=instance.gpu_ids)
        .exclude(instance_id=instance_id)
        .values_list("gpu_index", flat=True)
    )
    try:
        with transaction.atomic():
            instance_transition(
                instance_id=instance_id, state=InstanceState.STOPPING, message=message
            )
            held = set(
                GpuClaim.objects.filter(instance_id=instance_id).values_list("gpu_index", flat=True)
            )
            GpuClaim.objects.bulk_create(
                [
                    GpuClaim(host_id=instance.host_id, gpu_index=g, instance_id=instance_id)
                    for g in instance.gpu_ids
                    if g not in others and g not in held
                ]
            )
    except IntegrityError:
        holder = (
            ServerInstance.objects.filter(
                host_id=instance.host_id, port=instance.port, state__in=sorted(HOLDING_STATES)
            )
            .exclude(pk=instance_id)
            .first()
        )
        who = f"instance #{holder.pk} ({holder.state})" if holder else "another instance"
        instance_record_event(
            instance=instance,
            message=f"{message}: port {instance.port} is held by {who} now, so it is not "
            "checked and the instance stays " + str(instance.state),
        )
        return who, others
    return "", others


def instance_release_claims(*, instance_id: int) -> None:
    """Free the GPUs of an instance whose clean-up verified them free (after a crash)."""
    GpuClaim.objects.filter(instance_id=instance_id).delete()


M = TypeVar("M", bound=models.Model)

# Registry writes (the REST API's): fields by attname, free-form until the model's own
# validation (``full_clean``) decides, as in the admin: the API accepts what the admin accepts.


def _check_references(model: type[models.Model], data: JsonObject) -> None:
    # A missing host or container is a field error, not a crash inside the model's clean().
    errors: dict[str, str] = {}
    for field in model._meta.concrete_fields:
        if isinstance(field, models.ForeignKey) and data.get(field.attname) is not None:
            related = field.related_model
            assert isinstance(related, type)
            if not related._default_manager.filter(pk=data[field.attname]).exists():
                errors[field.attname] = f"No {related._meta.verbose_name} #{data[field.attname]}."
    if errors:
        raise ValidationError(errors)


def _refuse_nulls(model: type[models.Model], data: JsonObject) -> None:
    # full_clean() skips blank-able fields whose value is empty, None included, so an explicit
    # null would reach the NOT NULL column and fail there: it is a field error here instead.
    errors = {
        field.attname: "This field cannot be null"
        + ('; send "" to clear it.' if isinstance(field, models.CharField) and field.blank else ".")
        for field in model._meta.concrete_fields
        if not field.null and field.attname in data and data[field.attname] is None
    }
    if errors:
        raise ValidationError(errors)


def registry_create(*, model: type[M], data: JsonObject) -> M:
    """Create a Host, Container or ServerProfile; raises ValidationError keyed by field."""
    _refuse_nulls(model, data)
    _check_references(model, data)
    obj = model(**data)
    obj.full_clean()
    with transaction.atomic():
        obj.save()
    return obj


def _keep_masked_secrets(obj: models.Model, data: JsonObject) -> None:
    # The API shows secrets as "***" (hosts.masking): a body read and sent back carries the
    # mask, which must leave the stored secret as it is, never replace it.
    errors: dict[str, str] = {}
    for name in ("env", "command_env"):
        if isinstance(sent := data.get(name), dict):
            data[name], unknown = unmask_env(sent, getattr(obj, name))
            if unknown:
                errors[name] = (
                    f"{', '.join(unknown)}: {MASK} stands for a stored secret that is not "
                    "there; send the value itself"
                )
    if isinstance(sent_argv := data.get("launch_argv"), list):
        data["launch_argv"], positions = unmask_argv(sent_argv, obj.launch_argv)  # type: ignore[attr-defined]
        if positions:
            errors["launch_argv"] = (
                f"item {', '.join(str(i) for i in positions)}: {MASK} stands for a stored "
                "secret that is not there; send the value itself"
            )
    if errors:
        raise ValidationError(errors)


def registry_update(*, obj: M, data: JsonObject) -> M:
    """Apply the given fields, validate the whole object, save. A secret sent back as its
    mask (``***``) keeps its stored value."""
    _refuse_nulls(type(obj), data)
    _check_references(type(obj), data)
    _keep_masked_secrets(obj, data)
    if isinstance(obj, ServerProfile) and "kind" in data:
        profile_kind_switch_check(profile=obj, kind=str(data["kind"]))  # a choice: a str
    for name, value in data.items():
        setattr(obj, name, value)
    obj.full_clean()
    with transaction.atomic():
        obj.save()
    return obj
