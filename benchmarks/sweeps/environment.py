"""What makes a sweep's run comparable, frozen when the sweep is created or resumed.

The server's launch (masked argv and environment, GPUs, what it reported), its profile, the
target URL and model, and the client. Apart from the sweep services (benchmarks/sweeps/services.py)
because it is a record, not an action: the services call it, the experiments read it back
(experiments/environment.py), and nothing in it writes.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping
from typing import NotRequired, TypedDict

from benchlib.json_types import JsonObject
from hosts.masking import masked_argv, masked_env, masked_tree
from hosts.models import ServerInstance, ServerProfile


class EnvironmentTarget(TypedDict):
    base_url: str
    model: str  # "" until the sweep job asks the server
    metrics_url: NotRequired[str]  # an endpoint's
    model_source: NotRequired[str]  # kept across a resume when the job discovered the model


class EnvironmentClient(TypedDict):
    python: str
    executable: str


class EnvironmentInstance(TypedDict):
    """The server specdash launched, secrets masked."""

    id: int
    run_id: str
    host: str
    port: int
    launch_argv: list[str]
    env: JsonObject
    gpu_ids: list[int]
    server_info: JsonObject  # what the server reported about itself
    ready_at: str | None  # ISO 8601


class EnvironmentProfile(TypedDict):
    id: int
    name: str
    kind: NotRequired[str]  # written for an endpoint profile
    engine: str
    speculative: bool
    served_model_name: str
    tags: list[str]


class SweepEnvironment(TypedDict):
    """``sweep_environment``: what a sweep stores in ``Sweep.environment`` (a resume adds
    ``earlier_instances``, the servers it ran on before)."""

    target: EnvironmentTarget
    client: EnvironmentClient
    dashboard_host: str
    instance: NotRequired[EnvironmentInstance]  # a server specdash started
    profile: NotRequired[EnvironmentProfile]


def sweep_environment(
    *,
    instance: ServerInstance | None,
    base_url: str,
    model: str,
    endpoint: ServerProfile | None = None,
) -> SweepEnvironment:
    """What makes a run comparable, frozen at creation: the server's launch and the client."""
    env: SweepEnvironment = {
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
            # Secret values are not copied (a flag's value, an env var, a URL's password).
            "launch_argv": masked_argv(instance.launch_argv),
            "env": masked_env(dict(instance.env)),
            "gpu_ids": list(instance.gpu_ids),
            "server_info": masked_tree(dict(instance.server_info)),
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
    if endpoint is not None:
        # Nothing of its launch is known: the profile (whose process is not specdash's) and
        # where its metrics are read.
        env["target"]["metrics_url"] = endpoint.endpoint_metrics_url
        env["profile"] = {
            "id": endpoint.pk,
            "name": endpoint.name,
            "kind": endpoint.kind,
            "engine": endpoint.engine,
            "speculative": endpoint.speculative,
            "served_model_name": endpoint.served_model_name,
            "tags": list(endpoint.tags),
        }
    return env


def target_model(instance: ServerInstance | None, load: Mapping[str, object]) -> str:
    if load["model"]:
        return str(load["model"])
    if instance is not None:
        served = instance.profile.served_model_name or instance.server_info.get(
            "served_model_name", ""
        )
        if served:
            return str(served)
    return ""  # not known: the sweep job asks the server (/v1/models) before the first level
