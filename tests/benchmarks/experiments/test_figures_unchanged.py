"""The comparison, schedule and audit of an experiment are the same figures, field by field,
whether built the old way (one parse of the records file per level) or the new (each file
parsed once per build, in a child process)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from benchmarks import audit, audit_levels
from benchmarks.experiments import builds, records, workload
from benchmarks.experiments import recording as experiment_recording
from benchmarks.experiments import schedule as speculation_schedule
from benchmarks.experiments import services as experiment_services
from benchmarks.experiments.models import Experiment
from benchmarks.sweeps import recordfile
from hosts.models import ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep

LEVELS = [1, 2, 4, 8, 16, 32, 64, 128]


@pytest.fixture
def old_path(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """A switch to the code as it was: every level read parsing its records file again."""

    def switch() -> None:
        for module in (records, workload, audit_levels):
            monkeypatch.setattr(module, "read_record_file_once", recordfile.read_record_file)

    return switch


def _experiment(make_profile: Callable[..., ServerProfile], tmp: Path, per_arm: int) -> Experiment:
    simulator = ["python3", "-m", "benchlib.simulator"]
    pair = (
        make_profile(name="baseline", launch_argv=simulator),
        make_profile(
            name="eagle",
            speculative=True,
            launch_argv=[*simulator, "--speculative-num-steps", "3"],
        ),
    )
    experiment = experiment_services.experiment_create(
        profiles=list(pair), levels=LEVELS, load={"requests_per_level": 5}, repeats=1
    )
    for step in experiment.steps.select_related("arm"):
        speed = 1.0 if step.arm.label == "A" else 1.12
        values = {c: 90.0 * speed * c**0.8 for c in LEVELS}
        make_sweep(
            step.arm.profile, values, tmp=tmp, step=step, requests=per_arm // len(LEVELS),
            jitter=0.3, seed=step.pk,
        )  # fmt: skip
    return experiment


def _fields(old: Any, new: Any, where: str = "") -> list[str]:
    """Every path where ``old`` and ``new`` differ (exact: the figures are bit for bit)."""
    if isinstance(old, dict) and isinstance(new, dict):
        diffs = [f"{where}.{k}: only on one side" for k in set(old) ^ set(new)]
        for key in sorted(set(old) & set(new), key=str):
            diffs += _fields(old[key], new[key], f"{where}.{key}")
        return diffs
    if isinstance(old, list | tuple) and isinstance(new, list | tuple):
        if len(old) != len(new):
            return [f"{where}: {len(old)} items, then {len(new)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for d in _fields(a, b, f"{where}[{i}]")
        ]
    return [] if old == new else [f"{where}: {old!r}, then {new!r}"]


@pytest.mark.parametrize("per_arm", [1_000, 10_000])
@pytest.mark.django_db(transaction=True)
def test_comparison_schedule_and_audit_are_the_old_figures(
    make_profile: Callable[..., ServerProfile],
    tmp_path: Path,
    old_path: Callable[[], None],
    per_arm: int,
) -> None:
    experiment = _experiment(make_profile, tmp_path, per_arm=per_arm)
    inputs = builds.comparison_inputs(experiment_id=experiment.pk)
    # New: the worker's way, in a child process with the array bootstrap.
    new: Any = async_to_sync(builds.experiment_store_comparison_off_worker)(
        experiment_id=experiment.pk
    )
    experiment_recording.experiment_finish(experiment_id=experiment.pk, state="completed")
    new_audit = audit.audit_experiment(experiment=experiment).as_dict()
    assert new["schedule"]["available"], new["schedule"]["message"]
    # One run per arm: each level's interval is within-run (batch means over the run's
    # requests), built from the records both ways.
    assert any(row["ratios"][0]["method"] == "batch-means-log-t" for row in new["rows"])

    old_path()
    old: Any = builds.comparison_from_inputs(inputs)
    old["schedule"] = speculation_schedule.experiment_schedule(experiment=experiment)
    old_audit = audit.audit_experiment(experiment=experiment).as_dict()

    # When each was built is the one field that differs by design.
    assert old.pop("built_at") >= new.pop("built_at")
    assert _fields(old, new) == []
    assert _fields(old_audit, new_audit) == []
    assert new_audit["ok"], new_audit["problems"]
