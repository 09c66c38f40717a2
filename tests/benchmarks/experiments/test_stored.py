"""A GET reads what was built when the data changed: it never rebuilds from the records."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client

from benchmarks import audit
from benchmarks.experiments import comparison, stored
from benchmarks.experiments import recording as experiment_recording
from benchmarks.experiments import schedule as speculation_schedule
from benchmarks.experiments import services as experiment_services
from benchmarks.experiments.models import Experiment
from benchmarks.sweeps.models import Sweep, SweepLevel
from hosts.models import ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep


@pytest.fixture(autouse=True)
def _empty_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


class _Builds:
    """Counts the builds from records (comparison, schedule, audit) a request caused."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        for module, name in (
            (comparison, "comparison_build"),
            (speculation_schedule, "experiment_schedule"),
            (speculation_schedule, "schedule_build"),
            (audit, "audit_experiment"),
            (audit, "audit_sweeps"),
        ):
            monkeypatch.setattr(module, name, self._counting(name, getattr(module, name)))

    def _counting(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return real(*args, **kwargs)

        return counted


def _finished_experiment(make_profile: Callable[..., ServerProfile], tmp: Path) -> Experiment:
    pair = make_profile(name="baseline"), make_profile(name="eagle", speculative=True)
    experiment = experiment_services.experiment_create(
        profiles=list(pair), levels=[1, 8], load={"requests_per_level": 5}, repeats=1
    )
    for step in experiment.steps.select_related("arm"):
        values = {1: 92, 8: 400} if step.arm.label == "A" else {1: 96, 8: 260}
        make_sweep(step.arm.profile, values, tmp=tmp, step=step)
    experiment_recording.experiment_store_comparison(experiment_id=experiment.pk)
    experiment_recording.experiment_finish(experiment_id=experiment.pk, state="completed")
    return experiment


@pytest.mark.django_db
def test_no_get_of_a_finished_experiment_builds_from_the_records(
    client: Client,
    viewer: Any,
    make_profile: Callable[..., ServerProfile],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    experiment = _finished_experiment(make_profile, tmp_path)
    kept = Experiment.objects.get(pk=experiment.pk).comparison
    assert kept["schedule"] == speculation_schedule.experiment_schedule(experiment=experiment)
    builds = _Builds(monkeypatch)
    client.force_login(viewer)
    pk = experiment.pk
    for url in (
        f"/experiments/{pk}/comparison/",
        f"/experiments/{pk}/comparison.csv",
        f"/experiments/{pk}/report.html",
        f"/api/v1/experiments/{pk}/comparison",
        f"/api/v1/experiments/{pk}/schedule",
    ):
        response = client.get(url)
        assert response.status_code == 200, url
    assert builds.calls == []
    answer = client.get(f"/api/v1/experiments/{pk}/schedule").json()
    # Every field the API shows is the kept one, the schedule's decision included.
    assert answer == {k: v for k, v in kept["schedule"].items() if k in answer}
    assert "decision" in answer


@pytest.mark.django_db
def test_a_finished_experiment_without_a_kept_schedule_gets_it_built_and_stored_once(
    make_profile: Callable[..., ServerProfile], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    experiment = _finished_experiment(make_profile, tmp_path)
    older = dict(Experiment.objects.get(pk=experiment.pk).comparison)
    expected = older.pop("schedule")
    Experiment.objects.filter(pk=experiment.pk).update(comparison=older)
    builds = _Builds(monkeypatch)
    for _ in range(3):
        again = Experiment.objects.get(pk=experiment.pk)
        assert stored.experiment_schedule_read(experiment=again) == expected
    assert builds.calls == ["experiment_schedule", "schedule_build"]
    assert Experiment.objects.get(pk=experiment.pk).comparison["schedule"] == expected


@pytest.mark.django_db
def test_compare_sweeps_is_built_once_per_content_and_again_when_a_level_changes(
    client: Client,
    viewer: Any,
    make_profile: Callable[..., ServerProfile],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = make_sweep(make_profile(name="baseline"), {1: 92, 8: 400}, tmp=tmp_path)
    b = make_sweep(make_profile(name="eagle", speculative=True), {1: 96, 8: 260}, tmp=tmp_path)
    builds = _Builds(monkeypatch)
    client.force_login(viewer)
    query = f"sweeps={a.pk}&sweeps={b.pk}"
    first = client.get(f"/api/v1/comparisons?sweep={a.pk}&sweep={b.pk}").json()
    for url in (
        f"/compare/?{query}",
        f"/compare/table.csv?{query}",
        f"/compare/report.html?{query}",
    ):
        assert client.get(url).status_code == 200, url
    assert client.get(f"/api/v1/comparisons?sweep={a.pk}&sweep={b.pk}").json() == first
    # Built once for the four answers; the audit is never run by a GET (its stored outcome
    # is shown).
    assert sorted(builds.calls) == ["comparison_build"]

    # A level's figure changed (a resume re-ran it): the content differs, so it is rebuilt.
    SweepLevel.objects.filter(sweep=b, concurrency=8).update(output_tok_s=300.0)
    changed = client.get(f"/api/v1/comparisons?sweep={a.pk}&sweep={b.pk}").json()
    assert builds.calls.count("comparison_build") == 2
    assert changed != first

    # So does a records file rewritten under the same rows.
    records = Path(Sweep.objects.get(pk=a.pk).records_path)
    records.write_text(records.read_text() + "\n")
    client.get(f"/api/v1/comparisons?sweep={a.pk}&sweep={b.pk}")
    assert builds.calls.count("comparison_build") == 3
