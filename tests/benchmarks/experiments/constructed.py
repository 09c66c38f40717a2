"""Sweeps built directly in the database (and records files on disk) with known figures."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path

from benchmarks.experiments.models import ExperimentStep
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepState
from hosts.models import ServerProfile

TOKENS = 100


def closed_loop_records(
    level: int, concurrency: int, tok_s: float, *, requests: int, jitter: float, seed: int
) -> list[dict[str, object]]:
    """Records of C slots running back to back whose level throughput is about ``tok_s``:
    each request carries TOKENS tokens and lasts C*TOKENS/tok_s seconds, times ``1 +- jitter``."""
    rng = random.Random(seed)
    mean = concurrency * TOKENS / tok_s
    clocks = [1000.0] * concurrency
    out = []
    for i in range(requests):
        slot = i % concurrency
        start = clocks[slot]
        duration = mean * (1 + rng.uniform(-jitter, jitter))
        end = start + duration
        clocks[slot] = end
        out.append({"level": level, "id": f"r{i}", "slot": slot, "start": start, "end": end,
                    "first_token": start + duration * 0.05, "chunks": [], "out": TOKENS})  # fmt: skip
    return out


def make_sweep(
    profile: ServerProfile,
    values: Mapping[int, float],
    *,
    tmp: Path,
    records: bool = True,
    requests: int = 40,
    jitter: float = 0.1,
    step: ExperimentStep | None = None,
    states: dict[int, str] | None = None,
    seed: int = 0,
) -> Sweep:
    """A finished sweep of ``profile`` with one completed level per ``values`` entry."""
    sweep = Sweep.objects.create(
        name=f"{profile.name} constructed", profile=profile, levels=sorted(values),
        state=SweepState.COMPLETED, experiment_step=step,
        environment={"instance": {"launch_argv": list(profile.launch_argv), "server_info": {}},
                     "profile": {"engine": profile.engine}},
    )  # fmt: skip
    lines = []
    for index, (concurrency, tok_s) in enumerate(sorted(values.items())):
        level_records = closed_loop_records(
            index, concurrency, tok_s, requests=requests, jitter=jitter, seed=seed + index
        )
        lines.extend(level_records)
        # Stretch the times so the records give exactly the level's figure, as a measured
        # level's records do (the jitter alone would move it by a few per cent).
        ends = [float(r["end"]) for r in level_records]  # type: ignore[arg-type]
        stretch = TOKENS * len(level_records) / (max(ends) - 1000.0) / tok_s
        for r in level_records:
            for key in ("start", "end", "first_token"):
                r[key] = 1000.0 + (float(r[key]) - 1000.0) * stretch  # type: ignore[arg-type]
        SweepLevel.objects.create(
            sweep=sweep, index=index, concurrency=concurrency,
            state=(states or {}).get(concurrency, LevelState.COMPLETED),
            output_tok_s=tok_s, steady_output_tok_s=tok_s * 1.02, ttft_p50_ms=20.0 + concurrency,
            itl_p50_ms=1000.0 * concurrency / tok_s, e2e_p50_ms=1000.0 * concurrency * TOKENS / tok_s,
            requests_ok=requests,
        )  # fmt: skip
    if records:
        path = tmp / f"records-{sweep.pk}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in lines))
        sweep.records_path = str(path)
        sweep.save(update_fields=["records_path"])
    return sweep
