"""Every message the real producers put on the channel layer matches its event's declaration.

The producers run as they do in production (a simulated sweep through the job worker, an
experiment's state and step changes, a telemetry batch, an instance's lifecycle) while the
channel layer records every ``group_send``; each recorded message must name a declared event
type (core.realtime.declared_events) and its payload must have exactly the declared keys, each
of the declared type, nested rows included.
"""

from __future__ import annotations

import asyncio
import json
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Union

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from benchmarks.experiments import recording as experiment_recording
from benchmarks.experiments import services as experiment_services
from benchmarks.experiments.events import EXPERIMENT_STATE, EXPERIMENT_STEP
from benchmarks.experiments.models import StepState
from benchmarks.sweeps.channel import SWEEP_LEVEL, SWEEP_SAMPLES, SWEEP_STATE
from benchmarks.sweeps.models import Sweep, SweepSample, SweepState
from benchmarks.sweeps.services import sweep_create
from core import realtime
from core.jobs.worker import Worker, WorkerSettings
from core.models import Job
from hosts import services as host_services
from hosts.channel import INSTANCE_EVENT, INSTANCE_LOG, INSTANCE_READINESS, INSTANCE_STATE
from hosts.lifecycle import steps
from hosts.models import Host, InstanceState, ServerProfile
from hosts.telemetry import service as telemetry_service
from hosts.telemetry.channel import TELEMETRY_SAMPLES
from hosts.telemetry.probes import Sample
from tests.benchmarks.conftest import Simulator, load, start_simulator

# The events each producer test below must see; together they must be every declared event,
# so a new declaration needs a producer that exercises it here.
SWEEP_EVENTS = {SWEEP_SAMPLES.name, SWEEP_LEVEL.name, SWEEP_STATE.name}
EXPERIMENT_EVENTS = {EXPERIMENT_STATE.name, EXPERIMENT_STEP.name}
TELEMETRY_EVENTS = {TELEMETRY_SAMPLES.name}
INSTANCE_EVENTS = {
    e.name for e in (INSTANCE_STATE, INSTANCE_EVENT, INSTANCE_READINESS, INSTANCE_LOG)
}


def payload_errors(value: Any, declared: Any, path: str = "payload") -> list[str]:
    """Where ``value`` departs from the type ``declared`` (a TypedDict, nested as deep as it
    goes): extra or missing keys and values of another type. Empty when it matches."""
    if declared is Any or declared is object:
        return []  # declared free-form
    if typing.is_typeddict(declared):
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, not an object"]
        hints = typing.get_type_hints(declared)
        errors = [f"{path}.{key}: not declared" for key in value.keys() - hints.keys()]
        errors += [
            f"{path}.{key}: declared, missing" for key in declared.__required_keys__ - value.keys()
        ]
        for key in value.keys() & hints.keys():
            errors += payload_errors(value[key], hints[key], f"{path}.{key}")
        return errors
    origin, args = typing.get_origin(declared), typing.get_args(declared)
    if origin in (Union, types.UnionType):
        branches = [payload_errors(value, arg, path) for arg in args]
        return [] if any(not b for b in branches) else [f"{path}: {value!r} is not {declared}"]
    if origin is Literal:
        return [] if value in args else [f"{path}: {value!r} is not one of {args}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__}, not a list"]
        return [
            e for i, item in enumerate(value) for e in payload_errors(item, args[0], f"{path}[{i}]")
        ]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, not an object"]
        return [
            e
            for key, item in value.items()
            for e in payload_errors(key, args[0], f"{path} key")
            + payload_errors(item, args[1], f"{path}[{key!r}]")
        ]
    if declared is type(None) or declared is None:
        return [] if value is None else [f"{path}: {value!r} is not null"]
    if declared is float:  # an int is a float to a type checker, and in JSON
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [f"{path}: {value!r} is not a number"]
    if declared is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [f"{path}: {value!r} is not an integer"]
    if declared in (str, bool):
        return (
            [] if isinstance(value, declared) else [f"{path}: {value!r} is not {declared.__name__}"]
        )
    raise TypeError(f"{path}: the check does not know the declared type {declared!r}")


def message_errors(message: Mapping[str, Any]) -> list[str]:
    """A group_send message: ``{"type": a declared event, "payload": its declared shape}``,
    plain JSON."""
    declared = realtime.declared_events()
    if set(message) != {"type", "payload"}:
        return [f"message keys {sorted(message)}, not type and payload"]
    if message["type"] not in declared:
        return [f"undeclared event type {message['type']!r}"]
    errors = payload_errors(message["payload"], declared[message["type"]])
    try:
        json.dumps(message["payload"], allow_nan=False)
    except (TypeError, ValueError) as exc:
        errors.append(f"payload is not plain JSON: {exc}")
    return errors


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every message given to the channel layer's group_send, still delivered as before."""
    layer = get_channel_layer()
    assert layer is not None
    messages: list[dict[str, Any]] = []
    deliver = layer.group_send

    async def group_send(group: str, message: dict[str, Any]) -> None:
        messages.append(message)
        await deliver(group, message)

    monkeypatch.setattr(layer, "group_send", group_send)
    return messages


def _checked(messages: list[dict[str, Any]]) -> set[str]:
    """The event types sent, after checking every message (failing with every departure)."""
    errors = [f"{m.get('type')}: {e}" for m in messages for e in message_errors(m)]
    assert errors == []
    return {m["type"] for m in messages}


# The check itself: what it must catch.

LEVEL_MESSAGE: dict[str, Any] = {
    "sweep_id": 1,
    "level": {
        "index": 0, "concurrency": 2, "target_rate": None, "x": 2, "label": "C=2",
        "state": "running", "output_tok_s": None, "steady_output_tok_s": None,
        "ttft_p50_ms": None, "ttft_p99_ms": None, "tpot_p50_ms": None, "itl_p50_ms": None,
        "itl_p99_ms": None, "e2e_p50_ms": None, "achieved_concurrency": None,
        "requests_ok": 0, "requests_failed": 0, "reason": "", "started_at": 1.5,
        "finished_at": None,
    },
    "progress": {"level_number": 1, "level_count": 2, "finished_levels": 0, "eta_s": None,
                 "as_of": 2.0},
}  # fmt: skip


def test_the_check_accepts_a_declared_payload() -> None:
    assert message_errors({"type": "sweep.level", "payload": LEVEL_MESSAGE}) == []


def test_the_check_rejects_an_undeclared_event_type() -> None:
    errors = message_errors({"type": "sweep.levels", "payload": LEVEL_MESSAGE})
    assert errors == ["undeclared event type 'sweep.levels'"]


def test_the_check_rejects_an_undeclared_key_a_missing_key_and_a_wrong_type() -> None:
    level = {k: v for k, v in LEVEL_MESSAGE["level"].items() if k != "label"}
    payload = {**LEVEL_MESSAGE, "level": {**level, "requests_ok": "0", "colour": "red"}, "x": 1}
    errors = message_errors({"type": "sweep.level", "payload": payload})
    assert sorted(errors) == [
        "payload.level.colour: not declared",
        "payload.level.label: declared, missing",
        "payload.level.requests_ok: '0' is not an integer",
        "payload.x: not declared",
    ]


def test_the_check_rejects_what_json_cannot_carry() -> None:
    payload = {**LEVEL_MESSAGE, "progress": {**LEVEL_MESSAGE["progress"], "eta_s": float("nan")}}
    # (The wording after the colon is json's, and changes between Python versions.)
    errors = message_errors({"type": "sweep.level", "payload": payload})
    assert [e.partition(":")[0] for e in errors] == ["payload is not plain JSON"]


def test_every_declared_event_has_a_producer_checked_here() -> None:
    declared = set(realtime.declared_events())
    assert declared == SWEEP_EVENTS | EXPERIMENT_EVENTS | TELEMETRY_EVENTS | INSTANCE_EVENTS


# The producers.


async def _until(check: Callable[[], bool], timeout: float = 90) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await sync_to_async(check)():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


async def _sweep_through_the_worker(simulator: Simulator, levels: list[int]) -> None:
    # Levels of two seconds: each leaves live samples (about one a second) behind.
    sweep = await sync_to_async(sweep_create)(
        base_url=simulator.base_url, levels=levels,
        load=load(model=simulator.model, requests_per_level=None, duration=2, max_tokens=4),
    )  # fmt: skip
    stop = asyncio.Event()
    worker = Worker(worker_id="payload-worker", settings=WorkerSettings(poll_interval=0.1))
    task = asyncio.create_task(worker.run(stop))
    try:
        await _until(lambda: Job.objects.get(pk=sweep.job_id or 0).is_finished)
    finally:
        stop.set()
        await task
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.state == SweepState.COMPLETED, sweep.reason
    assert await SweepSample.objects.filter(sweep_id=sweep.pk).aexists()


@pytest.mark.django_db(transaction=True)
async def test_a_simulated_sweep_through_the_worker_sends_only_declared_payloads(
    sent: list[dict[str, Any]], local_host: Host, tmp_path: Path, settings: Any
) -> None:
    # The local host registered makes the simulator's loopback address a host's address.
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    simulator = start_simulator(tmp_path, "--profile", "fast")
    try:
        await _sweep_through_the_worker(simulator, [1])
        # A level run as two load generators whose samples are summed into one
        # (benchmarks.sweeps.split): the other shape of a live sample.
        settings.SPECDASH_LOADGEN_MAX_STREAMS = 1
        await _sweep_through_the_worker(simulator, [2])
    finally:
        simulator.kill()
    assert _checked(sent) >= SWEEP_EVENTS
    samples = [s for m in sent if m["type"] == SWEEP_SAMPLES.name for s in m["payload"]["samples"]]
    assert {s.get("shards") for s in samples} == {None, 2}


@pytest.mark.django_db
def test_an_experiments_state_and_step_changes_send_only_declared_payloads(
    sent: list[dict[str, Any]],
    make_profile: Callable[..., ServerProfile],
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        experiment = experiment_services.experiment_create(
            profiles=[make_profile(), make_profile()], levels=[1], load={"requests_per_level": 5}
        )
        plan = experiment_recording.experiment_begin(experiment_id=experiment.pk)
        assert plan is not None
        experiment_recording.experiment_step_update(
            step_id=plan.steps[0].step_id, state=StepState.STARTING
        )
    assert _checked(sent) == EXPERIMENT_EVENTS


@pytest.mark.django_db
def test_a_telemetry_batch_sends_only_declared_payloads(
    sent: list[dict[str, Any]], local_host: Host, django_capture_on_commit_callbacks: Any
) -> None:
    samples = [
        Sample(kind="gpu", t=1.0, data={"index": 0, "util": 40.0, "mem_used_mib": 1024}),
        Sample(kind="host", t=1.1, data={"cpu": 3.0}),
    ]
    with django_capture_on_commit_callbacks(execute=True):
        telemetry_service.telemetry_samples_record(host_id=local_host.pk, samples=samples)
    assert _checked(sent) == TELEMETRY_EVENTS


@pytest.mark.django_db
def test_an_instances_lifecycle_sends_only_declared_payloads(
    sent: list[dict[str, Any]],
    make_profile: Callable[..., ServerProfile],
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        instance = host_services.instance_start(profile=make_profile())
        plan = steps.load_plan(instance.pk)
        steps.readiness_progress(plan, "health", "waiting for /health")
        status: Any = {"log": {"lines": ["loading weights", "listening"]}}  # the key read
        steps.update_log(plan, status)
        host_services.instance_record_event(
            instance=instance, message="launched", data={"pid": 4242, "argv": ["sim", "--port"]}
        )
        host_services.instance_transition(
            instance_id=instance.pk, state=InstanceState.STOPPING, message="stop asked"
        )
    assert _checked(sent) == INSTANCE_EVENTS


ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("benchlib", "benchmarks", "core", "engines", "hosts", "specdash")
UNDECLARED_SENDS = ("realtime.broadcast(", "realtime.abroadcast(", "realtime.broadcast_on_commit(",
                    "group_send(")  # fmt: skip


def test_product_code_sends_only_through_a_declared_event() -> None:
    # The run-time check above sees the producers the tests run; this keeps every other one on
    # the declared route, where mypy checks its payload.
    offenders = [
        f"{path.relative_to(ROOT)}: {needle}"
        for package in PRODUCT_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "core" / "realtime.py"
        for needle in UNDECLARED_SENDS
        if needle in path.read_text()
    ]
    assert offenders == []
