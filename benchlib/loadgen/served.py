from __future__ import annotations

# The served model's name, from the server itself, for runs that were not told it.
#
# OpenAI-compatible servers list what they serve at GET /v1/models; vLLM and the simulator
# answer 404 to a request naming anything else, llama-server answers whatever the name. Asking
# first turns "every request failed with HTTP 404" into one clear error before any load.
import httpx

MODELS_PATH = "/v1/models"


class ModelDiscoveryError(Exception):
    """The served model could not be found out (the message says why and what to do)."""


async def discover_model(
    base_url: str, *, client: httpx.AsyncClient | None = None, http_timeout_s: float = 10.0
) -> str:
    """The first model id `base_url` lists at /v1/models (the base model on vLLM, where
    LoRA adapters follow it); raises ModelDiscoveryError."""
    url = base_url.rstrip("/") + MODELS_PATH
    own = client is None
    http = client or httpx.AsyncClient(timeout=http_timeout_s, trust_env=False)
    hint = "; give the served model name (--model, or the profile's served model name)"
    try:
        try:
            response = await http.get(url)
        except httpx.HTTPError as exc:
            raise ModelDiscoveryError(
                f"GET {url} failed: {type(exc).__name__}: {exc}{hint}"
            ) from exc
        if response.status_code != 200:
            raise ModelDiscoveryError(f"GET {url} answered HTTP {response.status_code}{hint}")
        try:
            data = response.json().get("data")
            ids = [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id")]
        except (ValueError, AttributeError, TypeError, KeyError) as exc:
            raise ModelDiscoveryError(f"GET {url} gave no model list ({exc}){hint}") from exc
        if not ids:
            raise ModelDiscoveryError(f"GET {url} lists no model{hint}")
        return ids[0]
    finally:
        if own:
            await http.aclose()
