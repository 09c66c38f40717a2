"""HTTP readiness checks: health answers as expected, the model is listed, one token comes back."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from benchlib.json_types import JsonObject


@dataclass(frozen=True)
class ReadinessTarget:
    base_url: str
    health_path: str
    expected_status: int
    openai_base_path: str
    model: str


@dataclass
class ReadinessResult:
    ready: bool
    stage: str  # "connect", "health", "models", "completion", "ready"
    detail: str = ""


async def check_ready(client: httpx.AsyncClient, target: ReadinessTarget) -> ReadinessResult:
    """One readiness probe; never raises for a server that is simply not up yet."""
    try:
        health = await client.get(target.base_url + target.health_path)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        return ReadinessResult(False, "connect", type(exc).__name__)
    except httpx.TimeoutException as exc:
        # Connected, but the answer did not come: SGLang's /health holds each call until its
        # scheduler produced output (~1 s; 503 only after 20 s), so a slow answer is the health
        # check's verdict pending, not a connection problem.
        return ReadinessResult(
            False, "health", f"{target.health_path} gave no answer in time ({type(exc).__name__})"
        )
    except httpx.HTTPError as exc:
        return ReadinessResult(False, "connect", type(exc).__name__)
    if health.status_code != target.expected_status:
        return ReadinessResult(
            False, "health", f"{target.health_path} answered {health.status_code}"
        )
    api = target.base_url + target.openai_base_path.rstrip("/")
    try:
        models = await client.get(api + "/models")
        listed = (
            [m.get("id") for m in models.json().get("data", [])]
            if models.status_code == 200
            else []
        )
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return ReadinessResult(False, "models", type(exc).__name__)
    if target.model and target.model not in listed:
        return ReadinessResult(False, "models", f"{target.model!r} not in {listed}")
    model = target.model or (listed[0] if listed else "")
    body: JsonObject = {"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0}
    try:
        completion = await client.post(api + "/completions", json=body)
    except httpx.HTTPError as exc:
        return ReadinessResult(False, "completion", type(exc).__name__)
    if completion.status_code != 200:
        return ReadinessResult(False, "completion", f"completion answered {completion.status_code}")
    return ReadinessResult(True, "ready")


async def is_healthy(client: httpx.AsyncClient, target: ReadinessTarget) -> bool:
    try:
        response = await client.get(target.base_url + target.health_path)
    except httpx.HTTPError:
        return False
    return response.status_code == target.expected_status


# What an engine says about itself, by the path that answered ("server_info", "version",
# "props"): each engine's own JSON, free-form (stored as it came, shown as it is).
ServerInfo = dict[str, JsonObject]


async def fetch_server_info(client: httpx.AsyncClient, base_url: str) -> ServerInfo:
    """Whatever the engine says about itself (SGLang /server_info, vLLM /version, llama-server
    /props: its build, slots and context)."""
    info: ServerInfo = {}
    for path in ("/server_info", "/version", "/props"):
        try:
            response = await client.get(base_url + path)
            if response.status_code == 200:
                data = response.json()
                info[path.strip("/")] = data if isinstance(data, dict) else {"value": data}
        except (httpx.HTTPError, ValueError):
            continue
    return info
