"""A profile's history: per sweep, its single-stream and saturation throughput (the history
page of a profile, benchmarks.experiments.views.profile_history).

Only runs under the same load are compared: a sweep of 8 requests per level at C=64 and one
of 400 at C=1..250 do not measure the same thing, so the runs are grouped by their load
(levels, requests or duration per level, and the workload: API, prompt set, input and output
tokens, EOS, arrival rate), and the page shows one group at a time, saying which."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

from benchlib.json_types import JsonObject
from benchlib.stats.saturation import find_saturation
from benchlib.stats.types import Curve
from benchmarks.experiments.verdicts import SaturationEntry, saturation_dict

# The load settings that change what a level measures (the rest, such as a timeout or the
# model name sent, do not make two runs incomparable).
LOAD_KEYS = ("requests_per_level", "duration", "api", "prompt_set", "input_tokens",
             "max_tokens", "ignore_eos", "temperature", "request_rate", "burstiness")  # fmt: skip


@dataclass(frozen=True)
class HistoryRun:
    sweep_id: int
    name: str
    created_at: datetime
    levels: dict[int, float]  # concurrency -> output tok/s of its completed levels
    tags: tuple[str, ...] = ()
    load_key: str = ""  # runs with the same key ran the same load (history_load)
    load_label: str = ""


class HistoryGroup(TypedDict):
    """A load the runs ran under (``history_groups``)."""

    key: str
    label: str
    count: int


class HistoryPoint(TypedDict):
    """One sweep on a profile's history (``history_build``)."""

    sweep_id: int
    name: str
    created_at: str  # ISO 8601
    lowest_concurrency: int
    lowest_tok_s: float
    c1_tok_s: float | None
    saturation: SaturationEntry
    levels: list[int]
    tags: list[str]


def history_load(*, levels: Sequence[int], load: Mapping[str, Any]) -> tuple[str, str]:
    """(key, label) of a sweep's load: the asked levels and the settings in LOAD_KEYS."""
    asked = sorted(int(c) for c in levels)
    shape: JsonObject = {"levels": asked}
    shape.update({k: load.get(k) for k in LOAD_KEYS if load.get(k) not in (None, "")})
    key = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:12]
    per_level = (
        f"{load['duration']:g} s per level"
        if load.get("duration")
        else f"{load.get('requests_per_level')} requests per level"
    )
    parts = [
        f"C={', '.join(str(c) for c in asked)}",
        per_level,
        f"{load.get('api') or 'completions'}, {load.get('prompt_set') or 'synthetic'} prompts",
        f"{load.get('input_tokens')} in / {load.get('max_tokens')} out tokens"
        + (", ignore EOS" if load.get("ignore_eos") else ""),
    ]
    if load.get("request_rate"):
        parts.append(f"{load['request_rate']} req/s")
    return key, "; ".join(parts)


def history_groups(*, runs: Sequence[HistoryRun]) -> list[HistoryGroup]:
    """The loads the runs ran under, the latest first: key, label and how many runs."""
    groups: dict[str, HistoryGroup] = {}
    for run in reversed(runs):  # runs are oldest first
        group = groups.setdefault(run.load_key, {"key": run.load_key, "label": run.load_label,
                                                 "count": 0})  # fmt: skip
        group["count"] += 1
    return list(groups.values())


def history_build(*, runs: Sequence[HistoryRun]) -> list[HistoryPoint]:
    """Per sweep of one profile: its lowest-C (single-stream) and saturation throughput."""
    out: list[HistoryPoint] = []
    for run in runs:
        levels = {c: v for c, v in run.levels.items() if v is not None and v > 0}
        if not levels:
            continue
        lowest = min(levels)
        saturation = find_saturation(Curve.from_values(run.name, levels))
        out.append(
            {
                "sweep_id": run.sweep_id,
                "name": run.name,
                "created_at": run.created_at.isoformat(),
                "lowest_concurrency": lowest,
                "lowest_tok_s": levels[lowest],
                "c1_tok_s": levels.get(1),
                "saturation": saturation_dict(saturation),
                "levels": sorted(levels),
                "tags": list(run.tags),
            }
        )
    return out
