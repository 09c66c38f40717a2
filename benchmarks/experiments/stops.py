"""What the ``experiment.run`` job (benchmarks.experiments.runner) asks of a server besides
starting it: a verified stop (``stop_verified``) and the host's GPUs and engine versions
(``host_probe``), with the runner's timings (``SETTINGS``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from benchlib.json_types import JsonObject
from benchmarks.experiments import store
from benchmarks.experiments.environment import model_paths
from hosts.agent.parts.probe import ContainerFacts, FileRecord
from hosts.lifecycle import store as lifecycle_store
from hosts.lifecycle.remote import Agent, AgentFailed
from hosts.models import Container, Host, InstanceState
from hosts.models.instances import ACTIVE_STATES
from hosts.transports.base import TransportError


@dataclass
class RunnerSettings:
    poll_seconds: float = 0.25
    # A verified stop of a large server (TERM, grace, KILL, verify) can take minutes.
    stop_timeout_s: float = 600.0
    sweep_cancel_timeout_s: float = 60.0
    probe_timeout_s: float = 30.0
    probe_host: bool = True
    # How many times one step's sweep is resumed after its load generator died.
    sweep_resumes: int = 5


SETTINGS = RunnerSettings()


@dataclass
class StopOutcome:
    clean: bool
    state: str
    reason: str
    # The server's own evidence as its lifecycle stored it (each verdict has its own shape).
    evidence: JsonObject


async def stop_verified(
    instance_id: int,
    *,
    cancelled: asyncio.Event | None = None,
    settings: RunnerSettings | None = None,
) -> StopOutcome:
    """Stop an instance (if it still runs) and wait for its lifecycle to finish with it.

    Clean means: ``stopped`` or ``failed`` (both end in a verified kill that found no
    process, a free port and GPU memory back to its level before the start), or ``crashed``
    with its GPU claims released (its clean-up verified the GPUs). ``dirty``, ``lost`` or a
    stop that does not finish within the timeout are not clean.
    """
    cfg = settings or SETTINGS
    instance = await store.ainstance_get(instance_id)
    if instance.state in ACTIVE_STATES and not instance.stop_requested:
        await lifecycle_store.ainstance_stop(instance=instance)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + cfg.stop_timeout_s
    while True:
        instance = await store.ainstance_get(instance_id)
        if instance.state not in ACTIVE_STATES and not await store.alifecycle_busy(instance_id):
            break
        if loop.time() > deadline:
            return StopOutcome(
                False,
                instance.state,
                f"the stop of server #{instance_id} was not verified within "
                f"{cfg.stop_timeout_s:g} s (still {instance.state})",
                dict(instance.evidence),
            )
        await asyncio.sleep(cfg.poll_seconds)
    state = instance.state
    claims_left = await store.agpu_claims_left(instance_id)
    clean = state in {InstanceState.STOPPED, InstanceState.FAILED} or (
        state == InstanceState.CRASHED and not claims_left
    )
    return StopOutcome(clean, state, instance.reason, dict(instance.evidence))


class HostProbe(TypedDict):
    """What a run's environment keeps of its host (``_probe``, from the agent's
    ``ProbeAnswer``; under the sweep's ``environment["host_probe"]``), or only the ``error``
    that left it unprobed."""

    error: NotRequired[str]
    gpus: NotRequired[list[str]]  # `nvidia-smi -L` lines
    nvidia_smi_error: NotRequired[str | None]
    driver_version: NotRequired[str | None]
    cuda_version: NotRequired[str | None]
    gpu_details: NotRequired[str]  # PROBE_GPU_FIELDS as CSV rows
    engines: NotRequired[dict[str, dict[str, object]]]
    load_avg: NotRequired[list[float] | None]
    files: NotRequired[list[FileRecord]]
    hostname: NotRequired[str | None]
    kernel: NotRequired[str | None]
    container: NotRequired[ContainerFacts | None]


async def host_probe(instance_id: int, seconds: float) -> HostProbe:
    """GPU names, clocks and power limits, engine versions, the load average and the model
    files the server's argv names, as the host reports them (best effort, never raises)."""
    instance = await store.ainstance_with_host(instance_id)
    return await _probe(
        instance.host, instance.profile.container, model_paths(instance.launch_argv), seconds
    )


async def endpoint_host_probe(profile_id: int, seconds: float) -> HostProbe:
    """The probe of an endpoint profile's registered host (in its container, if it names one):
    the same GPU, driver, engine and load figures as a managed server's run gets; no model
    files, since specdash never saw the endpoint's argv. No registered host: says so."""
    profile = await store.aprofile_with_host(profile_id)
    if profile.host is None:
        return {"error": "not probed: the endpoint has no registered host"}
    return await _probe(profile.host, profile.container, [], seconds)


async def _probe(
    host: Host, container: Container | None, files: list[str], seconds: float
) -> HostProbe:
    try:
        agent = Agent.for_host(host, container)
        answer = await agent.call("probe", {"files": files}, timeout=seconds)
    except (TransportError, AgentFailed, OSError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    smi = answer.get("nvidia_smi") or {}
    return {
        "gpus": list(smi.get("gpus") or []),
        "nvidia_smi_error": smi.get("error"),
        "driver_version": smi.get("driver_version"),
        "cuda_version": smi.get("cuda_version"),
        "gpu_details": smi.get("details") or "",
        "engines": answer.get("engines") or {},
        "load_avg": answer.get("load_avg"),
        "files": answer.get("files") or [],
        "hostname": answer.get("hostname"),
        "kernel": answer.get("kernel"),
        "container": answer.get("container"),
    }
