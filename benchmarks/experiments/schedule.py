"""A speculation schedule from a completed experiment whose arms are variants of one server.

Each arm's draft length is read from its profile's launch argv, where the engine's own flags
say it (``draft_length``); an arm without speculation drafts 0. The arms, simplest first
(shortest draft), go to ``stats.schedule.derive_schedule`` with their stored levels (repeats,
else the level's requests for a bootstrap, as the comparison builds its curves), and the
schedule is written as the engine's configuration by ``stats.schedule_configs`` (every engine's
for simulator arms: the simulator stands in for any of them).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from benchmarks.experiments import selectors
from benchmarks.experiments.comparison import SeriesData, series_curve
from benchmarks.models import Experiment
from benchmarks.simulator.profiles import PROFILES
from benchmarks.stats.schedule import Schedule, Variant, derive_schedule
from benchmarks.stats.schedule_configs import VLLM_SETTING, engine_schedules

# Where each engine's launch argv says the draft length (named in the message when it does not).
DRAFT_FLAGS = {
    "vllm": "num_speculative_tokens in --speculative-config",
    "sglang": "--speculative-num-steps",
    "llamacpp": "--spec-draft-n-max",
    "simulator": "--spec-steps, or a --profile with its spec_steps",
}


def _option(argv: Sequence[str], *names: str) -> str | None:
    """The value of the last ``--name value`` or ``--name=value`` in ``argv``."""
    found = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                found = argv[i + 1]
            elif arg.startswith(f"{name}="):
                found = arg.split("=", 1)[1]
    return found


def _count(text: str | None) -> int | None:
    if text is None or not text.strip().isdigit():
        return None
    return int(text)


def _vllm(argv: Sequence[str]) -> int | None:
    raw = _option(argv, "--speculative-config", "-sc")
    if raw is None:
        return 0
    try:
        config = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(config, dict) or VLLM_SETTING in config:
        return None  # not JSON, or already load-adaptive: no single draft length
    k = config.get("num_speculative_tokens")
    return k if isinstance(k, int) and not isinstance(k, bool) and k >= 0 else None


def _sglang(argv: Sequence[str]) -> int | None:
    if "--speculative-adaptive" in argv:
        return None
    steps = _option(argv, "--speculative-num-steps")
    if steps is None:
        # Without an algorithm SGLang does not speculate; with one, the step count is its
        # default, which the argv does not say.
        return 0 if _option(argv, "--speculative-algorithm") is None else None
    return _count(steps)


def _llamacpp(argv: Sequence[str]) -> int | None:
    n = _option(argv, "--spec-draft-n-max")
    if n is not None:
        return _count(n)
    spec_type = _option(argv, "--spec-type")
    drafter = _option(argv, "-md", "--model-draft")
    if drafter is None and spec_type in (None, "none"):
        return 0
    return None  # drafting with llama-server's default length, which the argv does not say


def _simulator(argv: Sequence[str]) -> int | None:
    if "--speculative-adaptive" in argv or _option(argv, "--speculative-config") is not None:
        return None
    steps = _option(argv, "--spec-steps")
    if steps is not None:
        return _count(steps)
    profile = PROFILES.get(_option(argv, "--profile") or "baseline")
    if profile is None:
        return None
    return profile.spec_steps if profile.speculative else 0


_READERS = {"vllm": _vllm, "sglang": _sglang, "llamacpp": _llamacpp, "simulator": _simulator}


def draft_length(engine: str, argv: Sequence[str]) -> int | None:
    """Draft tokens per verify step the launch argv configures (0: no speculation); None
    when the argv does not say (an engine default, a load-adaptive config, another engine)."""
    reader = _READERS.get(engine)
    return reader([str(a) for a in argv]) if reader is not None else None


def _vllm_base(argvs: Sequence[Sequence[str]]) -> dict[str, Any] | None:
    """The speculative config (method, draft model) of the longest-drafting vLLM arm."""
    best: tuple[int, dict[str, Any]] | None = None
    for argv in argvs:
        raw = _option([str(a) for a in argv], "--speculative-config", "-sc")
        config = json.loads(raw) if raw is not None else None
        if isinstance(config, dict):
            k = int(config.get("num_speculative_tokens") or 0)
            if best is None or k > best[0]:
                best = (k, config)
    return best[1] if best is not None else None


def _max_num_seqs(argvs: Sequence[Sequence[str]]) -> int | None:
    """The arms' common --max-num-seqs, so the last vLLM range ends there; None otherwise."""
    values = {_count(_option([str(a) for a in argv], "--max-num-seqs")) for argv in argvs}
    return values.pop() if len(values) == 1 else None


def _unavailable(message: str) -> dict[str, Any]:
    return {"available": False, "message": message}


def _schedule_dict(
    schedule: Schedule, variants: Sequence[tuple[SeriesData, int]], engine: str
) -> dict[str, Any]:
    labels = {series.name: series.label for series, _ in variants}
    bands = []
    for band in schedule.bands:
        interval = band.gain_interval
        bands.append({
            "variant": band.variant, "label": labels.get(band.variant, ""),
            "draft_length": band.draft_length, "start": band.start, "end": band.end,
            "levels": list(band.levels), "expected_gain": band.expected_gain,
            "gain_low": interval[0] if interval else None,
            "gain_high": interval[1] if interval else None,
            "runner_up": [g.versus for g in band.over_runner_up],
        })  # fmt: skip
    return {
        "available": True,
        "message": "",
        "engine": engine,
        "reference": schedule.reference,
        "confidence": schedule.confidence,
        "variants": [{"label": s.label, "name": s.name, "draft_length": k} for s, k in variants],
        "bands": bands,
        "steps": [dataclasses.asdict(step) for step in schedule.steps()],
        "choices": [dataclasses.asdict(choice) for choice in schedule.choices],
        "untested": list(schedule.untested),
        "description": schedule.describe(),
    }


def schedule_build(arms: Sequence[tuple[SeriesData, Sequence[str]]]) -> dict[str, Any]:
    """The schedule of arms given as (series, profile launch argv); ``available`` false with
    a ``message`` saying why when there is none."""
    if len(arms) < 2:
        return _unavailable("A schedule needs at least two arms (variants of one server).")
    engines = sorted({series.engine for series, _ in arms})
    if len(engines) > 1:
        return _unavailable(
            f"The arms run different engines ({', '.join(engines)}): a schedule switches the "
            "draft length of one server."
        )
    engine = engines[0]
    variants: list[tuple[SeriesData, int]] = []
    unread = []
    for series, argv in arms:
        k = draft_length(engine, argv)
        if k is None:
            unread.append(f"{series.label} ({series.name})")
        else:
            variants.append((series, k))
    if unread:
        where = DRAFT_FLAGS.get(engine, f"no flag known for the engine {engine!r}")
        return _unavailable(
            f"No draft length could be read for arm{'s' if len(unread) > 1 else ''} "
            f"{', '.join(unread)}: its profile's launch argv does not state it ({where})."
        )
    # Simplest first: the order derive_schedule prefers when the data cannot tell.
    variants.sort(key=lambda pair: pair[1])
    empty = [s.label for s, _ in variants if not s.runs]
    if empty:
        return _unavailable(f"No completed levels yet for arm(s) {', '.join(empty)}.")
    try:
        schedule = derive_schedule([Variant(series_curve(series), k) for series, k in variants])
    except ValueError as exc:
        return _unavailable(f"No schedule: {exc}.")
    out = _schedule_dict(schedule, variants, engine)
    configs = engine_schedules(
        schedule.steps(),
        "" if engine == "simulator" else engine,
        vllm_base=_vllm_base([argv for _, argv in arms]) if engine == "vllm" else None,
        max_num_seqs=_max_num_seqs([argv for _, argv in arms]) if engine == "vllm" else None,
    )
    out["configs"] = [dataclasses.asdict(config) for config in configs]
    return out


def experiment_schedule(*, experiment: Experiment) -> dict[str, Any]:
    """The schedule of an experiment's arms from their stored levels (a fixed number of
    queries whatever the number of arms)."""
    arms = selectors.experiment_arm_series(experiment=experiment)
    return schedule_build([(series, list(arm.profile.launch_argv)) for arm, series in arms])
