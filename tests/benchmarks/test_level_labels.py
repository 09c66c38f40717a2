"""Labels say what each figure measures: the steady window where it is not "all C in flight",
and the failed requests beside a comparison's figures (which are over successful ones)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from benchlib.loadgen.metrics import summarize_level
from benchlib.loadgen.summary import LevelSummary
from benchmarks.experiments import comparison
from benchmarks.experiments.report import comparison_csv
from benchmarks.experiments.series import sweep_series
from benchmarks.sweeps import recording, services
from benchmarks.sweeps.models import SweepLevel
from hosts.models import ServerInstance, ServerProfile
from tests.benchlib.loadgen.conftest import make_record
from tests.benchmarks.conftest import load
from tests.benchmarks.experiments.constructed import make_sweep

pytestmark = pytest.mark.django_db


def _summary(concurrency: int, requests: int, *, mode: str = "closed") -> LevelSummary:
    records = [
        make_record(f"r{i}", i * 0.01, [(i * 0.01 + 0.05, 1), (i * 0.01 + 0.5, 4)], slot=i)
        for i in range(requests)
    ]
    summary = summarize_level(records, concurrency=concurrency, mode=mode)
    return summary | {"status": "completed", "reason": None, "client": {}}


def test_the_sweep_page_marks_steady_windows_that_are_not_all_c_in_flight(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[8, 2, 4], load=load())
    # 3 requests on 8 slots: C is never reached (the records say so, not the code).
    short = _summary(8, 3)
    assert short["steady"]["reached"] is False and short["steady"]["in_flight_level"] == 3
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=short | {"level_index": 0})
    full = _summary(2, 2)
    assert full["steady"]["reached"] is True
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=full | {"level_index": 1})
    rate = _summary(4, 3, mode="rate")
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=rate | {"level_index": 2})
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    rows = page.split('data-testid="level-row"')[1:]
    assert len(rows) == 3
    marks = [row.split('data-testid="level-steady"')[1].split("</td>")[0] for row in rows]
    assert "C not reached: 3 in flight" in marks[0]
    assert "steady-window" not in marks[1]
    assert "arrival window" in marks[2]


def test_the_comparison_shows_each_levels_failed_requests(
    client: Client, operator: Any, make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    a = make_sweep(make_profile(name="base"), {1: 90, 4: 300}, tmp=tmp_path)
    b = make_sweep(make_profile(name="spec", speculative=True), {1: 110, 4: 320}, tmp=tmp_path)
    SweepLevel.objects.filter(sweep=a).update(summary={"requests": {"ok": 40, "failed": 0}})
    SweepLevel.objects.filter(sweep=b, concurrency=4).update(
        summary={"requests": {"ok": 36, "failed": 4}}
    )
    built = comparison.comparison_build(series=sweep_series(sweeps=[a, b]))
    (row,) = [r for r in built["rows"] if r["concurrency"] == 4]
    assert [(c["requests_ok"], c["requests_failed"]) for c in row["cells"]] == [(40, 0), (36, 4)]
    table = list(csv.DictReader(io.StringIO(comparison_csv(built))))
    assert [r["B_requests_failed"] for r in table] == ["", "4"]  # level 1 has no summary
    client.force_login(operator)
    body = client.get(f"/compare/?sweeps={a.pk}&sweeps={b.pk}").content.decode()
    assert body.count('data-testid="failed-requests"') == 1
    assert "4 failed" in body
