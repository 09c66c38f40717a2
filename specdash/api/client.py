"""A small synchronous client of the REST API (httpx), used by ``manage.py specdash`` and
usable from scripts and notebooks. It imports nothing from Django."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchlib.json_types import JsonObject

INSTANCE_SETTLED = frozenset({"ready", "failed", "crashed", "dirty", "stopped", "lost"})


class ApiFailure(Exception):
    """The API answered with its error shape (or something that is not the API)."""

    def __init__(self, status: int, code: str, message: str, fields: dict[str, list[str]]) -> None:
        detail = "; ".join(f"{k}: {' '.join(v)}" for k, v in fields.items())
        super().__init__(f"{status} {code}: {message}" + (f" ({detail})" if detail else ""))
        self.status = status
        self.code = code
        self.fields = fields


@dataclass
class SpecdashClient:
    base_url: str
    token: str
    # Explicit, generous timeouts: a start or a comparison can take seconds to answer.
    timeout: float = 60.0
    _http: httpx.Client = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._http = httpx.Client(
            base_url=self.base_url.rstrip("/") + "/api/v1",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=self.timeout,
        )

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
        if response.is_success:
            ctype = response.headers.get("content-type", "")
            return response.json() if ctype.startswith("application/json") else response.text
        try:
            error = response.json()["error"]
        except (ValueError, KeyError, TypeError):
            raise ApiFailure(response.status_code, "http_error", response.text[:200], {}) from None
        raise ApiFailure(response.status_code, error["code"], error["message"], error["fields"])

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json=body if body is not None else {})

    def profile_id(self, name_or_id: str) -> int:
        if name_or_id.isdigit():
            return int(name_or_id)
        page = self.get("/profiles", limit=200)
        for profile in page["items"]:
            if profile["name"] == name_or_id:
                return int(profile["id"])
        raise ApiFailure(404, "not_found", f"No profile named {name_or_id!r}.", {})

    # The bodies are the API's JSON: this client imports nothing from Django, so their shapes
    # (specdash.api.schemas) are not restated here.
    def wait(
        self,
        path: str,
        done: Callable[[JsonObject], bool],
        *,
        timeout: float = 600.0,
        interval: float = 1.0,
    ) -> JsonObject:
        """Poll ``path`` until ``done(body)``; TimeoutError with the last body otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            body: JsonObject = self.get(path)
            if done(body):
                return body
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} still {body.get('state')} after {timeout:g} s")
            time.sleep(interval)

    def wait_instance(
        self, instance_id: int, *, states: frozenset[str] = INSTANCE_SETTLED, timeout: float = 600.0
    ) -> JsonObject:
        return self.wait(
            f"/instances/{instance_id}", lambda b: b["state"] in states, timeout=timeout
        )

    def wait_finished(self, path: str, *, timeout: float = 3600.0) -> JsonObject:
        return self.wait(path, lambda b: bool(b["finished"]), timeout=timeout)
