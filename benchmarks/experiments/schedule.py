"""A speculation schedule from a completed experiment whose arms are variants of one server.

Each arm's draft length is read from its profile's launch argv, where the engine's own flags
say it (``drafts.draft_length``); an arm without speculation drafts 0. The arms, simplest first
(shortest draft), go to ``stats.schedule.derive_schedule`` with their stored levels (repeats,
else the level's requests for batch means, as the comparison builds its curves), and the
schedule is written as the engine's configuration by ``stats.schedule_configs`` (every engine's
for simulator arms: the simulator stands in for any of them).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, TypedDict

from benchlib.json_types import JsonObject
from benchlib.stats.decision import DEFAULT_MARGIN, Arm
from benchlib.stats.decision_matrix import MatrixVariant, decide_matrix
from benchlib.stats.schedule import Schedule, Variant, derive_schedule
from benchlib.stats.switch_costs import StepEvidence
from benchmarks.experiments.axes import experiment_axes, load_axes
from benchmarks.experiments.decisions import is_rate_mode
from benchmarks.experiments.drafts import DRAFT_FLAGS, count, draft_length, option
from benchmarks.experiments.level_runs import LevelRun, SeriesData, series_curve
from benchmarks.experiments.models import Experiment
from benchmarks.experiments.series import experiment_arm_series, running_batches
from benchmarks.experiments.workload import acceptance_row


class ScheduleVariant(TypedDict):
    label: str
    name: str
    draft_length: int


class ScheduleBand(TypedDict):
    """A range of concurrencies one variant serves best (``stats.schedule.Band``), with its
    gain over the runner-up and that gain's interval (None when it has none)."""

    variant: str
    label: str
    draft_length: int
    start: int
    end: int | None
    levels: list[int]
    expected_gain: float
    gain_low: float | None
    gain_high: float | None
    runner_up: list[str]


class ScheduleReport(TypedDict):
    """An experiment's speculation schedule as stored and shown (``schedule_build``), or, with
    ``available`` false, the ``message`` saying why it has none. ``steps``, ``choices``,
    ``decision`` and ``configs`` are the statistics' own records as plain data (their
    dataclasses' fields, declared in ``benchlib.stats``)."""

    available: bool
    message: str
    engine: NotRequired[str]
    reference: NotRequired[str]
    confidence: NotRequired[float]
    variants: NotRequired[list[ScheduleVariant]]
    bands: NotRequired[list[ScheduleBand]]
    steps: NotRequired[list[dict[str, Any]]]
    choices: NotRequired[list[dict[str, Any]]]
    untested: NotRequired[list[int]]
    description: NotRequired[str]
    decision: NotRequired[dict[str, Any]]
    configs: NotRequired[list[dict[str, Any]]]


def _vllm_base(argvs: Sequence[Sequence[str]]) -> JsonObject | None:
    """The speculative config (method, draft model) of the longest-drafting vLLM arm: the JSON
    a profile's argv gives ``--speculative-config``, as written there."""
    best: tuple[int, JsonObject] | None = None
    for argv in argvs:
        raw = option([str(a) for a in argv], "--speculative-config", "-sc")
        config = json.loads(raw) if raw is not None else None
        if isinstance(config, dict):
            k = int(config.get("num_speculative_tokens") or 0)
            if best is None or k > best[0]:
                best = (k, config)
    return best[1] if best is not None else None


def _max_num_seqs(argvs: Sequence[Sequence[str]]) -> int | None:
    """The arms' common --max-num-seqs, so the last vLLM range ends there; None otherwise."""
    values = {count(option([str(a) for a in argv], "--max-num-seqs")) for argv in argvs}
    return values.pop() if len(values) == 1 else None


def _mean(values: Sequence[Any]) -> float | None:
    present = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return statistics.fmean(present) if present else None


def step_evidence(series: SeriesData) -> dict[int, StepEvidence]:
    """Per completed level what its runs say about the variant's engine step (means over the
    repeats; ``switch_costs``): output tok/s, output tokens per successful request, TPOT p50,
    and the accept length as the comparison's acceptance row reads it (the servers' counters
    over the level first)."""
    grouped: dict[int, list[LevelRun]] = {}
    for run in series.runs:
        grouped.setdefault(run.concurrency, []).append(run)
    out: dict[int, StepEvidence] = {}
    for c, runs in sorted(grouped.items()):
        tok_s = _mean([r.figures.get("output_tok_s") for r in runs])
        if tok_s is None or tok_s <= 0:
            continue
        tokens = _mean([r.summary.get("output_tokens") for r in runs])
        ok = _mean([(r.summary.get("requests") or {}).get("ok") for r in runs])
        acceptance = acceptance_row(runs)
        out[c] = StepEvidence(
            output_tok_s=tok_s,
            tokens_per_request=tokens / ok if tokens and ok else None,
            tpot_ms=_mean([r.figures.get("tpot_p50_ms") for r in runs]),
            accept_length=acceptance["accept_length"],
            accept_source=str(acceptance["accept_length_source"] or ""),
        )
    return out


# A schedule ranks the variants' throughput, which at a fixed request rate is the offered rate.
RATE_MODE_MESSAGE = (
    "The levels ran at a fixed request rate, where throughput is the offered rate: no schedule "
    "is derived from it (the comparison's verdicts decide on latency there)."
)


def _unavailable(message: str) -> ScheduleReport:
    return {"available": False, "message": message}


def _schedule_dict(
    schedule: Schedule, variants: Sequence[tuple[SeriesData, int]], engine: str
) -> ScheduleReport:
    labels = {series.name: series.label for series, _ in variants}
    bands: list[ScheduleBand] = []
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


def schedule_build(
    arms: Sequence[tuple[SeriesData, Sequence[str]]],
    observed: Mapping[int, Mapping[int, int]] | None = None,
) -> ScheduleReport:
    """The schedule of arms given as (series, profile launch argv); ``available`` false with
    a ``message`` saying why when there is none. ``observed``: the running-batch readings per
    level (``series.running_batches``) the switches are placed from."""
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
    if any(is_rate_mode(s.runs) for s, _ in variants):
        return _unavailable(RATE_MODE_MESSAGE)
    curves = [(series, series_curve(series), k) for series, k in variants]
    try:
        schedule = derive_schedule(
            [Variant(curve, k) for _, curve, k in curves], margin=DEFAULT_MARGIN, observed=observed
        )
    except ValueError as exc:
        return _unavailable(f"No schedule: {exc}.")
    out = _schedule_dict(schedule, variants, engine)
    engine_key = "" if engine == "simulator" else engine
    vllm_base = _vllm_base([argv for _, argv in arms]) if engine == "vllm" else None
    max_num_seqs = _max_num_seqs([argv for _, argv in arms]) if engine == "vllm" else None
    # The statements come from the decision of the same matrix, whose choice per level is
    # the schedule's own rule with the same margin: the same steps, said once.
    decision = decide_matrix(
        [
            MatrixVariant(Arm(s.name, s.label, k > 0, engine_key), curve, k, step_evidence(s))
            for s, curve, k in curves
        ],
        engine=engine_key,
        vllm_base=vllm_base,
        max_num_seqs=max_num_seqs,
        observed=observed,
    )
    out["decision"] = decision.to_dict()
    out["configs"] = [dataclasses.asdict(config) for config in decision.configs]
    return out


def experiment_schedule(*, experiment: Experiment) -> ScheduleReport:
    """The schedule of an experiment's arms from their stored levels (a fixed number of
    queries whatever the number of arms)."""
    loads = load_axes(experiment_axes(experiment=experiment)["declared_axis"])
    if loads:
        return _unavailable(
            f"The arms differ in their load ({', '.join(f'load: {key}' for key in loads)}), "
            "not only in their launch: a schedule switches the draft length of one server "
            "under one load."
        )
    arms = experiment_arm_series(experiment=experiment)
    observed = running_batches(series=[series for _, series in arms])
    return schedule_build(
        [(series, list(arm.profile.launch_argv)) for arm, series in arms], observed
    )
