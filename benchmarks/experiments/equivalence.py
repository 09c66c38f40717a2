"""Output equivalence: the same fixed prompts, greedy, to each profile; the outputs compared.

Speculative decoding with greedy sampling is meant to produce exactly the target model's
output; a configuration that changes it (a draft model with another tokenizer, a numerics
change in a fused kernel) is a correctness problem that a throughput win must not hide.
Each server gets the prompts one at a time (so batching cannot change its numerics) with
``temperature: 0`` right after it becomes ready, before the sweep.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import NotRequired, TypedDict

import httpx

PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    "Write a Python function that returns the n-th Fibonacci number.",
    "List the first five prime numbers, separated by commas:",
    "Translate into German: The weather is nice today.",
)
MAX_TOKENS = 32
REQUEST_TIMEOUT_S = 120.0
# How many differing prompts a comparison lists per profile (the rest are counted).
MAX_LISTED_DIFFERENCES = 5


class PromptOutput(TypedDict):
    """One prompt's answer: its text and what the engine said of it, or the error that left
    it without one."""

    text: NotRequired[str]
    finish_reason: NotRequired[str | None]
    completion_tokens: NotRequired[int | None]
    seconds: NotRequired[float]
    error: NotRequired[str]


class EquivalenceCheck(TypedDict):
    """One server's output check (``equivalence_probe``), stored on its experiment step."""

    prompts: list[str]
    max_tokens: int
    temperature: int
    model: str
    outputs: list[PromptOutput]


class OutputDifference(TypedDict):
    """A prompt whose outputs differ (``output_differences``): each side's text, or its
    error where it had no output."""

    prompt_index: int
    prompt: str
    reference: str | None
    candidate: str | None
    common_prefix_chars: int


class ProfileEquivalence(TypedDict):
    """A profile's checks against the reference's first one, and against its own first."""

    label: str
    checks: int
    equivalent: bool
    deterministic: bool
    difference_count: int
    differences: list[OutputDifference]


class EquivalenceSummary(TypedDict):
    """Per profile label, whether its outputs match the reference's (``equivalence_summary``);
    the prompts and their length only once the reference was checked."""

    checked: bool
    reference: str
    prompts: NotRequired[list[str]]
    max_tokens: NotRequired[int | None]
    profiles: list[ProfileEquivalence]
    flagged: list[str]


async def equivalence_probe(
    *,
    base_url: str,
    model: str,
    api_path: str = "/v1",
    prompts: Sequence[str] = PROMPTS,
    max_tokens: int = MAX_TOKENS,
    client: httpx.AsyncClient | None = None,
) -> EquivalenceCheck:
    """Send each prompt as a non-streaming greedy completion; never raises per prompt
    (a failed request is recorded with its error and counts as a difference)."""
    url = base_url.rstrip("/") + "/" + api_path.strip("/") + "/completions"
    own = client is None
    http = client or httpx.AsyncClient(timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=5.0))
    outputs: list[PromptOutput] = []
    try:
        for prompt in prompts:
            body = {
                "model": model,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0,
                "stream": False,
            }
            started = time.perf_counter()
            try:
                response = await http.post(url, json=body)
                data = response.json() if response.status_code == 200 else None
                if data is None:
                    outputs.append({"error": f"HTTP {response.status_code}: {response.text[:200]}"})
                    continue
                choice = (data.get("choices") or [{}])[0]
                outputs.append(
                    {
                        "text": str(choice.get("text", "")),
                        "finish_reason": choice.get("finish_reason"),
                        "completion_tokens": (data.get("usage") or {}).get("completion_tokens"),
                        "seconds": round(time.perf_counter() - started, 4),
                    }
                )
            except (httpx.HTTPError, ValueError, AttributeError, IndexError) as exc:
                outputs.append({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        if own:
            await http.aclose()
    return {
        "prompts": list(prompts),
        "max_tokens": max_tokens,
        "temperature": 0,
        "model": model,
        "outputs": outputs,
    }


def output_differences(
    reference: EquivalenceCheck, candidate: EquivalenceCheck
) -> list[OutputDifference]:
    """Prompts whose outputs differ (or errored on either side), in prompt order."""
    ref_prompts = list(reference.get("prompts") or [])
    ref_outputs = list(reference.get("outputs") or [])
    cand_by_prompt = dict(
        zip(candidate.get("prompts") or [], candidate.get("outputs") or [], strict=False)
    )
    differences: list[OutputDifference] = []
    for i, prompt in enumerate(ref_prompts):
        ref = ref_outputs[i] if i < len(ref_outputs) else {"error": "no output"}
        cand = cand_by_prompt.get(prompt, {"error": "prompt not sent"})
        same = "error" not in ref and "error" not in cand and ref.get("text") == cand.get("text")
        if not same:
            differences.append(
                {
                    "prompt_index": i,
                    "prompt": prompt,
                    "reference": ref.get("text", ref.get("error")),
                    "candidate": cand.get("text", cand.get("error")),
                    "common_prefix_chars": _common_prefix(
                        str(ref.get("text", "")), str(cand.get("text", ""))
                    ),
                }
            )
    return differences


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def equivalence_summary(
    *, reference: str, runs: Mapping[str, list[EquivalenceCheck]] | None
) -> EquivalenceSummary:
    """Per profile label: do all its checks match the reference's first check?

    A profile's own repeats are compared too: a server whose greedy output changes from one
    start to the next is flagged as not deterministic, whatever the other profiles do.
    """
    runs = runs or {}
    baseline_runs = runs.get(reference) or []
    if not baseline_runs:
        return {"checked": False, "reference": reference, "profiles": [], "flagged": []}
    baseline = baseline_runs[0]
    profiles: list[ProfileEquivalence] = []
    for label, checks in runs.items():
        differences: list[OutputDifference] = []
        for check in checks:
            differences.extend(output_differences(baseline, check))
        unstable = any(output_differences(checks[0], other) for other in checks[1:])
        profiles.append(
            {
                "label": label,
                "checks": len(checks),
                "equivalent": not differences,
                "deterministic": not unstable,
                "difference_count": len(differences),
                "differences": differences[:MAX_LISTED_DIFFERENCES],
            }
        )
    flagged = [p["label"] for p in profiles if not (p["equivalent"] and p["deterministic"])]
    return {
        "checked": True,
        "reference": reference,
        "prompts": list(baseline.get("prompts") or []),
        "max_tokens": baseline.get("max_tokens"),
        "profiles": profiles,
        "flagged": flagged,
    }
