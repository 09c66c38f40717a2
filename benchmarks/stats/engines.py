"""Engine settings that can express "no speculation above N concurrent requests" (engines.md).

The engines count the requests they are running (their batch), not the client's concurrency;
in a closed-loop sweep at steady state the two are close, so a crossover measured on C is a
reasonable first threshold, to be checked with a sweep of the configured server.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineOption:
    engine: str
    setting: str
    value: str
    note: str


def speculation_switches(disable_above: int) -> tuple[EngineOption, ...]:
    """The engine options that keep speculation up to ``disable_above`` requests, off above."""
    n = disable_above
    return (
        EngineOption(
            engine="vLLM",
            setting="num_speculative_tokens_per_batch_size",
            value=f"0 for batch sizes above {n}",
            note="newer releases, in --speculative-config: maps batch-size ranges to a number "
            "of speculative tokens, 0 disabling speculation for that range",
        ),
        EngineOption(
            engine="vLLM",
            setting="disable_by_batch_size",
            value=str(n + 1),
            note="older releases (--speculative-disable-by-batch-size): speculation is off for "
            f"new requests once the running queue reaches {n + 1}",
        ),
        EngineOption(
            engine="TensorRT-LLM",
            setting="max_concurrency",
            value=str(n),
            note="in the EAGLE speculative config: speculation is off above this many "
            "concurrent requests",
        ),
        EngineOption(
            engine="SGLang",
            setting="",
            value="",
            note="no upstream switch disables speculation above a batch size; serve the loaded "
            "case without speculation, or route by load between two servers",
        ),
    )


def describe(options: tuple[EngineOption, ...]) -> str:
    """One clause for the verdict's text, e.g. "TensorRT-LLM max_concurrency=1"."""
    parts = []
    for option in options:
        if option.setting:
            parts.append(f"{option.engine} {option.setting}={option.value}")
        else:
            parts.append(f"{option.engine}: none upstream")
    return "; ".join(parts)
