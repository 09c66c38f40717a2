"""The inputs of a comparison: each arm's (or picked sweep's) completed levels as a series.

Apart from the experiment selectors (experiments/selectors.py: steps, snapshots, the picker, a
profile's history) because this is what every comparison, schedule, tuning and break-even
figure is computed from: the level rows and their records turned into ``SeriesData``, the
environment each arm ran in, and the batch sizes the server ran at per level. One place reads
them, so every surface compares the same numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TypedDict

from benchlib.json_types import JsonObject
from benchlib.loadgen.settings import stored_workload
from benchmarks.experiments.decisions import workload_fingerprint
from benchmarks.experiments.level_runs import LevelRun, SeriesData
from benchmarks.experiments.models import Experiment, ExperimentArm
from benchmarks.experiments.selectors import experiment_arms
from benchmarks.sweeps.level_figures import LEVEL_FIGURES
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel
from hosts.masking import masked_tree
from hosts.models import TelemetryKind, TelemetrySample


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


class EnvironmentSummary(TypedDict):
    """One sweep's environment as its series shows it (``_environment_summary``, from its
    ``SweepEnvironment``, masked again); the launch figures are None for an endpoint's sweep,
    which ran no server of specdash's."""

    sweep_id: int
    engine: str | None
    launch_argv: list[str] | None
    env: JsonObject | None
    server_info: JsonObject | None
    gpus: list[str]
    driver_version: str | None
    cuda_version: str | None
    host: str | None
    endpoint: bool
    base_url: str | None
    notes: str
    tags: list[str]
    created_at: str
    workload: str


def _environment_summary(sweep: Sweep) -> EnvironmentSummary:
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
