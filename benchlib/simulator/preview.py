"""A preview of issue 18's loop on the virtual clock, without servers or Django: fixed draft
lengths x levels on a speculative profile, the schedule derived from them
(``benchlib.stats.schedule``), its SGLang configuration as ``schedule_configs`` writes it,
read back by the simulator's own argv parser, and that tuned server run at the same levels.

Each figure is the mean of ``repeats`` seeded virtual runs (closed loop, ``ignore_eos``,
ramp-up left out), so it measures the model, not this machine."""

from __future__ import annotations

import shlex
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchlib.stats.schedule import Schedule, Variant, derive_schedule
from benchlib.stats.schedule_configs import EngineSchedule, engine_schedules
from benchlib.stats.types import Curve, LevelSample

from .adaptive import AdaptiveSpeculation
from .cli import parse_config
from .profiles import Profile, get_profile
from .virtual import simulate_closed_loop

LEVELS = (1, 2, 5, 10, 30, 70, 100, 250)
DRAFT_LENGTHS = (0, 1, 2, 3, 5)


@dataclass(frozen=True)
class Preview:
    levels: tuple[int, ...]
    fixed: dict[str, dict[int, LevelSample]]  # variant name -> level -> repeats
    schedule: Schedule
    sglang: EngineSchedule
    vllm: EngineSchedule
    tuned: dict[int, LevelSample]


def variant_name(k: int) -> str:
    return "off" if k == 0 else f"K={k}"


def _level(
    profile: Profile, c: int, speculation: AdaptiveSpeculation, repeats: int, duration_s: float
) -> LevelSample:
    runs = [
        simulate_closed_loop(
            profile,
            c,
            prompt_tokens=32,
            output_tokens=256,
            duration_s=duration_s,
            warmup_s=duration_s / 6,
            seed=seed,
            speculation=speculation,
        ).output_tok_s
        for seed in range(repeats)
    ]
    return LevelSample(c, statistics.fmean(runs), repeats=runs)


def preview(
    profile_name: str = "eagle3",
    *,
    draft_lengths: Sequence[int] = DRAFT_LENGTHS,
    levels: Sequence[int] = LEVELS,
    repeats: int = 3,
    duration_s: float = 600.0,
) -> Preview:
    """Run the fixed variants, derive the schedule, run it as the emitted argv configures."""
    profile = get_profile(profile_name)
    fixed: dict[str, dict[int, LevelSample]] = {}
    variants = []
    for k in sorted(draft_lengths):  # simplest first: off, then shorter drafts
        every = AdaptiveSpeculation("vllm", (1,), (k,))
        samples = {c: _level(profile, c, every, repeats, duration_s) for c in levels}
        fixed[variant_name(k)] = samples
        curve = Curve(variant_name(k), tuple(samples.values()), speculative=k > 0)
        variants.append(Variant(curve, k))
    schedule = derive_schedule(variants)
    steps = schedule.steps()
    by_engine = {e.engine: e for e in engine_schedules(steps, vllm_base={"method": "eagle3"})}
    sglang, vllm = by_engine["SGLang"], by_engine["vLLM"]
    with tempfile.TemporaryDirectory() as folder:
        argv = shlex.split(sglang.value)
        if sglang.file_name:
            path = Path(folder) / sglang.file_name
            path.write_text(sglang.file_text, encoding="utf-8")
            argv = [str(path) if a == sglang.file_name else a for a in argv]
        if not argv:  # the schedule never drafts
            argv = ["--speculative-num-steps", "0"]
        config = parse_config(["--profile", profile_name, *argv])
    speculation = config.speculation
    assert speculation is not None
    tuned = {c: _level(profile, c, speculation, repeats, duration_s) for c in levels}
    return Preview(tuple(levels), fixed, schedule, sglang, vllm, tuned)


def table(result: Preview) -> list[str]:
    """The preview as printable lines: tok/s per level and variant, the tuned arm against the
    best fixed one (by its mean), then the schedule and its engine configurations."""
    names = list(result.fixed)
    header = ["C", *names, "tuned", "best fixed", "tuned/best"]
    rows = [header]
    for c in result.levels:
        means = {n: result.fixed[n][c].value for n in names}
        best = max(means, key=lambda n: means[n])
        tuned = result.tuned[c].value
        rows.append(
            [
                str(c),
                *(f"{means[n]:.1f}" for n in names),
                f"{tuned:.1f}",
                best,
                f"{tuned / means[best]:.3f}",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  " + "  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    lines.append(f"  schedule: {result.schedule.describe()}")
    lines.append(f"  SGLang: {result.sglang.value or result.sglang.note}")
    if result.sglang.file_text:
        lines.append(f"    {result.sglang.file_name}: {' '.join(result.sglang.file_text.split())}")
    lines.append(f"  vLLM: {result.vllm.value or result.vllm.note}")
    return lines
