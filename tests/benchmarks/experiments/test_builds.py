"""The worker's end-of-run build leaves the shared sync thread to the other jobs."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from benchmarks.experiments import builds
from benchmarks.experiments import services as experiment_services
from benchmarks.experiments.models import Experiment
from benchmarks.sweeps.models import Sweep, SweepSample
from benchmarks.sweeps.recording import sweep_samples_add
from hosts.models import ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep

LEVELS = [1, 2, 4, 8, 16, 32, 64, 128]


async def _build_beside_a_sweep(experiment_id: int, sweep_id: int) -> tuple[float, list[float]]:
    """The build as the worker runs it while another sweep stores a sample every 0.25 s
    through the same shared sync thread; the build's length and each gap between samples."""
    stored: list[float] = []
    done = asyncio.Event()

    async def other_sweep() -> None:
        while not done.is_set():
            await sync_to_async(sweep_samples_add)(
                sweep_id=sweep_id,
                samples=[{"event": "sample", "level_index": 0, "t": len(stored), "tok_s": 1.0}],
            )
            stored.append(time.perf_counter())
            await asyncio.sleep(0.25)

    ticker = asyncio.create_task(other_sweep())
    t0 = time.perf_counter()
    await builds.experiment_store_comparison_off_worker(experiment_id=experiment_id)
    end = time.perf_counter()
    done.set()
    await ticker
    return end - t0, [b - a for a, b in itertools.pairwise([t0, *stored, end])]


@pytest.mark.django_db(transaction=True)
def test_another_sweeps_samples_keep_flowing_while_the_comparison_is_built(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    # 2k requests per arm over 8 levels: a build of seconds, longer than the 2 s a live chart
    # may go without samples, so a build on the shared thread would show as one long gap.
    pair = make_profile(name="baseline"), make_profile(name="eagle", speculative=True)
    experiment = experiment_services.experiment_create(
        profiles=list(pair), levels=LEVELS, load={"requests_per_level": 5}, repeats=1
    )
    for step in experiment.steps.select_related("arm"):
        speed = 1.0 if step.arm.label == "A" else 1.1
        values = {c: 90.0 * speed * c**0.8 for c in LEVELS}
        make_sweep(step.arm.profile, values, tmp=tmp_path, step=step, requests=250, seed=step.pk)
    other = Sweep.objects.create(name="running beside it", levels=[1])

    build_s, gaps = async_to_sync(_build_beside_a_sweep)(experiment.pk, other.pk)

    assert max(gaps) < 2.0, (build_s, gaps)
    assert SweepSample.objects.filter(sweep=other).count() == len(gaps) - 1 >= build_s / 0.25 / 2
    stored: dict[str, Any] = Experiment.objects.get(pk=experiment.pk).comparison
    assert stored["rows"] and stored["schedule"]
