"""Read-side queries for experiments, comparisons and a profile's history.

The dicts built here are also the payloads of the ``experiment.*`` events, so the snapshot a
viewer gets on connecting and the events that follow have the same shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db.models import Prefetch, QuerySet

from benchlib.loadgen.settings import stored_workload
from benchmarks.controller_report import tracks_context
from benchmarks.experiments.comparison import LevelRun, SeriesData
from benchmarks.experiments.decisions import workload_fingerprint
from benchmarks.experiments.history import HistoryRun, history_load
from benchmarks.models import (
    Experiment,
    ExperimentArm,
    ExperimentStep,
    LevelState,
    Sweep,
    SweepLevel,
    SweepState,
)
from benchmarks.sweeps.plan import is_rate_sweep
from hosts.masking import masked_tree
from hosts.models import ServerInstance, ServerProfile, TelemetryKind, TelemetrySample
from hosts.models.instances import HOLDING_STATES

# The level figures a comparison reads (SweepLevel's denormalised headline columns).
LEVEL_FIGURES = (
    "output_tok_s",
    "steady_output_tok_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "achieved_concurrency",
)


def _epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def experiment_detail(*, experiment_id: int) -> Experiment | None:
    return (
        Experiment.objects.select_related("created_by", "job")
        .prefetch_related("arms__profile")
        .filter(pk=experiment_id)
        .first()
    )


def experiment_arms(*, experiment_id: int) -> list[ExperimentArm]:
    return list(
        ExperimentArm.objects.filter(experiment_id=experiment_id)
        .select_related("profile")
        .order_by("position")
    )


def experiment_steps(*, experiment_id: int) -> list[ExperimentStep]:
    return list(
        ExperimentStep.objects.filter(experiment_id=experiment_id)
        .select_related("arm__profile", "instance", "sweep")
        .order_by("index")
    )


def _sweep_of(step: ExperimentStep) -> Sweep | None:
    try:
        return step.sweep
    except Sweep.DoesNotExist:
        return None


def step_as_dict(step: ExperimentStep) -> dict[str, Any]:
    sweep = _sweep_of(step)
    started, finished = step.started_at, step.finished_at
    return {
        "id": step.pk,
        "index": step.index,
        "label": step.arm.label,
        "profile": step.arm.profile.name,
        # A server running outside specdash: its step starts and stops nothing.
        "endpoint": step.arm.profile.is_endpoint,
        "repeat": step.repeat,
        "state": step.state,
        "state_label": step.get_state_display(),
        "finished": step.is_finished,
        "reason": step.reason,
        "instance_id": step.instance_id,
        "instance_state": step.instance.state if step.instance is not None else None,
        "sweep_id": sweep.pk if sweep is not None else None,
        "sweep_state": sweep.state if sweep is not None else None,
        "started_at": _epoch(started),
        "finished_at": _epoch(finished),
        "duration_s": (finished - started).total_seconds() if started and finished else None,
    }


def experiment_as_dict(experiment: Experiment) -> dict[str, Any]:
    return {
        "id": experiment.pk,
        "name": experiment.name,
        "state": experiment.state,
        "state_label": experiment.get_state_display(),
        "finished": experiment.is_finished,
        "reason": experiment.reason,
        "started_at": _epoch(experiment.started_at),
        "finished_at": _epoch(experiment.finished_at),
        "has_comparison": bool(experiment.comparison),
    }


def experiment_port_holder(*, experiment: Experiment) -> ServerInstance | None:
    """The server whose port a step could not start on (the runner notes it in the history),
    while it still holds it: the page offers to stop it, then Retry."""
    for entry in reversed(experiment.history or []):
        if entry.get("event") == "port_held" and entry.get("instance"):
            return (
                ServerInstance.objects.select_related("profile")
                .filter(pk=entry["instance"], state__in=sorted(HOLDING_STATES))
                .first()
            )
    return None


def experiment_current_step(*, steps: Sequence[ExperimentStep]) -> ExperimentStep | None:
    """The step in progress, else the last one that started."""
    started = [s for s in steps if s.started_at is not None]
    running = [s for s in started if not s.is_finished]
    if running:
        return running[-1]
    return started[-1] if started else None


def experiment_snapshot(*, experiment_id: int) -> dict[str, Any] | None:
    experiment = Experiment.objects.filter(pk=experiment_id).first()
    if experiment is None:
        return None
    steps = experiment_steps(experiment_id=experiment_id)
    return {
        "experiment": experiment_as_dict(experiment),
        "steps": [step_as_dict(s) for s in steps],
    }


def experiment_controller_tracks(*, experiment_id: int) -> list[dict[str, Any]]:
    """Controller tracking per concurrency across the experiment's runs (every arm on the same
    workload: the adaptive arm beside the static ones), from each level's stored per-second
    figures; one query that reads only the stored ``controller`` figures."""
    rows = (
        SweepLevel.objects.filter(
            sweep__experiment_step__experiment_id=experiment_id, summary__has_key="controller"
        )
        .order_by("sweep__experiment_step__index", "index")
        .values_list(
            "sweep__experiment_step__arm__label",
            "sweep__experiment_step__repeat",
            "concurrency",
            "summary__controller",
        )
    )
    runs = [
        (label if not repeat else f"{label} run {repeat + 1}", c, f"C={c}", figures)
        for label, repeat, c, figures in rows
    ]
    return tracks_context(runs, scope=f"experiment-{experiment_id}")


def experiment_profiles() -> QuerySet[ServerProfile]:
    return ServerProfile.objects.select_related("host").order_by("name")


# -- comparison inputs --


def _level_runs(
    levels: Iterable[SweepLevel], records_paths: dict[int, str], workloads: dict[int, str]
) -> list[LevelRun]:
    runs = []
    for level in levels:
        runs.append(
            LevelRun(
                sweep_id=level.sweep_id,
                index=level.index,
                concurrency=level.concurrency,
                figures={name: getattr(level, name) for name in LEVEL_FIGURES},
                records_path=records_paths.get(level.sweep_id, ""),
                attempt=level.attempt,
                summary=dict(level.summary or {}),
                server=dict(level.server_metrics or {}),
                workload=workloads.get(level.sweep_id, ""),
            )
        )
    return runs


def _workloads(sweeps: Iterable[Sweep]) -> dict[int, str]:
    return {s.pk: workload_fingerprint(s.load) for s in sweeps}


def _completed_levels(sweep_ids: Sequence[int]) -> list[SweepLevel]:
    return list(
        SweepLevel.objects.filter(sweep_id__in=sweep_ids, state=LevelState.COMPLETED).order_by(
            "sweep_id", "index"
        )
    )


_GPU_LINE = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: [^)]*\))?$")


def gpu_summary(lines: Sequence[str], gpu_ids: Sequence[int]) -> list[str]:
    """``nvidia-smi -L`` lines of the server's GPUs as "4 x NAME (GPUs 0, 1, 2, 3)"."""
    names: dict[str, list[int]] = {}
    for line in lines:
        match = _GPU_LINE.match(line.strip())
        if match is None:
            continue
        index = int(match.group(1))
        if not gpu_ids or index in gpu_ids:
            names.setdefault(match.group(2), []).append(index)
    return [
        f"{len(idx)} x {name} (GPU{'s' if len(idx) > 1 else ''} {', '.join(map(str, idx))})"
        for name, idx in names.items()
    ]


def _environment_summary(sweep: Sweep) -> dict[str, Any]:
    # Masked again here: snapshots taken before argv was masked still hold their secrets.
    env = masked_tree(sweep.environment or {})
    instance = env.get("instance") or {}
    profile = env.get("profile") or {}
    probe = env.get("host_probe") or {}
    return {
        "sweep_id": sweep.pk,
        "engine": profile.get("engine"),
        "launch_argv": instance.get("launch_argv"),
        "env": instance.get("env"),
        "server_info": instance.get("server_info"),
        "gpus": gpu_summary(probe.get("gpus") or [], instance.get("gpu_ids") or []),
        "driver_version": probe.get("driver_version"),
        "cuda_version": probe.get("cuda_version"),
        "host": instance.get("host"),
        # A server specdash did not start: its URL stands where the launch would.
        "endpoint": profile.get("kind") == "endpoint",
        "base_url": (env.get("target") or {}).get("base_url"),
        "notes": sweep.notes,
        "tags": list(sweep.tags),
        "created_at": sweep.created_at.isoformat(),
        "workload": stored_workload(sweep.load),
    }


def _series(
    *,
    label: str,
    name: str,
    speculative: bool,
    profile_id: int | None,
    sweeps: Sequence[Sweep],
    engine: str = "",
) -> SeriesData:
    ids = [s.pk for s in sweeps]
    paths = {s.pk: s.records_path for s in sweeps}
    return SeriesData(
        label=label,
        name=name,
        speculative=speculative,
        profile_id=profile_id,
        sweep_ids=tuple(ids),
        runs=tuple(_level_runs(_completed_levels(ids), paths, _workloads(sweeps))),
        environment=[_environment_summary(s) for s in sweeps],
        engine=engine,
    )


def experiment_series(*, experiment: Experiment) -> list[SeriesData]:
    """One series per arm, in arm order; its sweeps are the arm's steps' sweeps (repeats)."""
    out = []
    for arm in experiment_arms(experiment_id=experiment.pk):
        sweeps = list(
            Sweep.objects.filter(experiment_step__arm=arm).order_by("experiment_step__index")
        )
        out.append(
            _series(
                label=arm.label,
                name=arm.profile.name,
                speculative=arm.profile.speculative,
                profile_id=arm.profile_id,
                sweeps=sweeps,
                engine=arm.profile.engine,
            )
        )
    return out


def experiment_equivalence_runs(*, experiment: Experiment) -> dict[str, list[dict[str, Any]]]:
    """Each arm's output checks (one per step that ran them), by arm label."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for step in experiment_steps(experiment_id=experiment.pk):
        if step.equivalence:
            runs.setdefault(step.arm.label, []).append(step.equivalence)
    return runs


def sweeps_by_ids(*, sweep_ids: Sequence[int]) -> list[Sweep]:
    """The sweeps asked for, in the order asked (unknown ids dropped)."""
    found = {s.pk: s for s in Sweep.objects.select_related("profile").filter(pk__in=sweep_ids)}
    return [found[i] for i in sweep_ids if i in found]


def sweep_series(*, sweeps: Sequence[Sweep]) -> list[SeriesData]:
    """One series per picked sweep, labelled A, B, ... in the order given."""
    names = [str(s.profile.name if s.profile is not None else s) for s in sweeps]
    out = []
    for i, sweep in enumerate(sweeps):
        name = names[i]
        if names.count(name) > 1:
            name = f"{name} (sweep #{sweep.pk})"
        out.append(
            _series(
                label=_label(i),
                name=name,
                speculative=bool(sweep.profile.speculative) if sweep.profile else False,
                profile_id=sweep.profile_id,
                sweeps=[sweep],
                engine=sweep.profile.engine if sweep.profile else "",
            )
        )
    return out


def _label(position: int) -> str:
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return letters[position] if position < len(letters) else f"S{position + 1}"


def rate_sweep_ids(*, sweeps: Sequence[Sweep]) -> list[int]:
    """The rate sweeps among ``sweeps``: their levels share one concurrency (the cap), so the
    comparisons, which pair levels by concurrency, cannot take them."""
    return [s.pk for s in sweeps if is_rate_sweep(s.load or {})]


# The picker and a profile's history list this many sweeps, newest first, and say so when
# there are more (the count comes from the *_total selectors beside them).
LIST_LIMIT = 200


def _comparable() -> QuerySet[Sweep]:
    return Sweep.objects.filter(
        state__in=[SweepState.COMPLETED, SweepState.CANCELLED, SweepState.FAILED],
        level_results__state=LevelState.COMPLETED,
    ).distinct()


def comparable_sweeps_total() -> int:
    """How many sweeps the picker could list (rate sweeps included), before its cut."""
    return _comparable().count()


def profile_history_total(*, profile_id: int) -> int:
    """How many of the profile's sweeps have a completed level, before the history's cut."""
    return (
        Sweep.objects.filter(profile_id=profile_id, level_results__state=LevelState.COMPLETED)
        .distinct()
        .count()
    )


def comparable_sweeps(*, limit: int | None = None) -> list[Sweep]:
    """Sweeps that finished with at least one completed level, newest first (the picker);
    rate sweeps are left out (see rate_sweep_ids)."""
    sweeps = list(
        _comparable()
        .select_related("profile", "experiment_step__experiment")
        .order_by("-created_at")[: limit or LIST_LIMIT]
    )
    rate = set(rate_sweep_ids(sweeps=sweeps))
    return [s for s in sweeps if s.pk not in rate]


def profile_history_runs(*, profile_id: int, limit: int | None = None) -> list[HistoryRun]:
    """The profile's latest sweeps with completed levels, oldest first."""
    levels = SweepLevel.objects.filter(state=LevelState.COMPLETED).order_by("concurrency")
    sweeps = list(
        Sweep.objects.filter(profile_id=profile_id, level_results__state=LevelState.COMPLETED)
        .distinct()
        .prefetch_related(Prefetch("level_results", queryset=levels, to_attr="completed"))
        .order_by("-created_at")[: limit or LIST_LIMIT]
    )
    sweeps.reverse()
    rate = set(rate_sweep_ids(sweeps=sweeps))  # levels keyed by C: a rate sweep has one C
    runs = []
    for s in sweeps:
        if s.pk in rate:
            continue
        key, label = history_load(levels=s.levels, load=s.load or {})
        runs.append(
            HistoryRun(
                sweep_id=s.pk,
                name=str(s),
                created_at=s.created_at,
                levels={lv.concurrency: lv.output_tok_s for lv in s.completed if lv.output_tok_s},
                tags=tuple(s.tags),
                load_key=key,
                load_label=label,
            )
        )
    return runs


def profile_detail(*, profile_id: int) -> ServerProfile | None:
    return ServerProfile.objects.filter(pk=profile_id).first()


def experiment_arm_series(*, experiment: Experiment) -> list[tuple[ExperimentArm, SeriesData]]:
    """Each arm (with its profile) and its completed levels, in three queries whatever the
    number of arms (``experiment_series`` without the per-arm environment summaries)."""
    arms = experiment_arms(experiment_id=experiment.pk)
    sweeps = list(
        Sweep.objects.filter(experiment_step__arm__experiment_id=experiment.pk)
        .select_related("experiment_step")
        .order_by("experiment_step__index")
    )
    levels = _completed_levels([s.pk for s in sweeps])
    paths = {s.pk: s.records_path for s in sweeps}
    workloads = _workloads(sweeps)
    out = []
    for arm in arms:
        ids = [s.pk for s in sweeps if s.experiment_step and s.experiment_step.arm_id == arm.pk]
        runs = _level_runs([lv for lv in levels if lv.sweep_id in ids], paths, workloads)
        series = SeriesData(
            label=arm.label, name=arm.profile.name, speculative=arm.profile.speculative,
            profile_id=arm.profile_id, sweep_ids=tuple(ids), runs=tuple(runs),
            engine=arm.profile.engine,
        )  # fmt: skip
        out.append((arm, series))
    return out


def _level_window(run: LevelRun) -> tuple[float, float] | None:
    """The level's steady window (all C in flight, wall clock), else its measured window."""
    steady = run.summary.get("steady")
    for source in (steady if isinstance(steady, dict) else {}, run.summary):
        window = source.get("window_wall")
        if isinstance(window, list | tuple) and len(window) == 2:
            a, b = window
            if isinstance(a, int | float) and isinstance(b, int | float) and b > a:
                return float(a), float(b)
    return None


def running_batches(*, series: Sequence[SeriesData]) -> dict[int, dict[int, int]]:
    """Per concurrency level, how often the server's running-requests gauge read each batch
    size during the level's steady window, pooled over every series' runs (the readings the
    telemetry kept with each sweep, about one a second): what the server ran at that level,
    from which a schedule's switches are placed (``benchlib.stats.batch_thresholds``). One
    query whatever the number of runs."""
    runs = [run for s in series for run in s.runs]
    windows = {(run.sweep_id, run.index): _level_window(run) for run in runs}
    sweep_ids = sorted({run.sweep_id for run in runs})
    readings: dict[int, list[tuple[float, int]]] = {}
    samples = TelemetrySample.objects.filter(
        sweep_id__in=sweep_ids, kind=TelemetryKind.SERVER
    ).values_list("sweep_id", "t", "data")
    for sweep_id, t, data in samples:
        running = data.get("running") if isinstance(data, dict) else None
        if isinstance(running, int | float) and running >= 0 and sweep_id is not None:
            readings.setdefault(int(sweep_id), []).append((float(t), round(running)))
    out: dict[int, dict[int, int]] = {}
    for run in runs:
        window = windows[(run.sweep_id, run.index)]
        if window is None:
            continue
        counts = out.setdefault(run.concurrency, {})
        for t, batch in readings.get(run.sweep_id, []):
            if window[0] <= t <= window[1]:
                counts[batch] = counts.get(batch, 0) + 1
    return {c: dict(sorted(counts.items())) for c, counts in sorted(out.items())}
