from __future__ import annotations

import csv
import io
import json
import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from benchmarks.experiments.decisions import arm_health
from benchmarks.experiments.level_runs import LevelRun
from benchmarks.sweeps import recording, services
from benchmarks.sweeps.models import Sweep, SweepLevel, SweepState
from core.models import Job, JobState
from hosts.models import ServerInstance
from tests.benchmarks.conftest import level_summary_event, load

pytestmark = pytest.mark.django_db

FORM = {
    "levels": "1, 2, 5",
    "requests_per_level": "20",
    "duration": "",
    "warmup_requests": "2",
    "input_tokens": "64",
    "max_tokens": "32",
    "api": "chat",
    "ignore_eos": "on",
    "temperature": "",
    "name": "first",
    "notes": "",
    "tags": "base, sim",
}


def test_viewer_cannot_open_the_form_create_or_cancel(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1], load=load())
    client.force_login(viewer)
    assert client.get("/sweeps/new/").status_code == 403
    assert client.post("/sweeps/new/", {**FORM, "instance": ready_instance.pk}).status_code == 403
    assert client.post(f"/sweeps/{sweep.pk}/cancel/").status_code == 403
    assert Sweep.objects.count() == 1 and Sweep.objects.get().state == SweepState.QUEUED
    page = client.get("/sweeps/").content.decode()
    assert 'data-testid="new-sweep"' not in page
    assert 'data-testid="cancel-sweep"' not in client.get(f"/sweeps/{sweep.pk}/").content.decode()


def test_operator_creates_a_sweep_from_the_form(
    client: Client, operator: Any, ready_instance: ServerInstance
) -> None:
    client.force_login(operator)
    page = client.get("/sweeps/new/").content.decode()
    assert "1, 2, 5, 10, 30, 70, 100, 250" in page
    assert ready_instance.profile.name in page
    response = client.post("/sweeps/new/", {**FORM, "instance": ready_instance.pk})
    sweep = Sweep.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/sweeps/{sweep.pk}/"
    assert sweep.levels == [1, 2, 5] and sweep.tags == ["base", "sim"]
    assert sweep.load["api"] == "chat" and sweep.load["ignore_eos"] is True
    assert sweep.load["warmup_requests"] == 2 and sweep.created_by == operator
    assert Job.objects.get().kind == "sweep.run"


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"levels": "1, two"}, "levels", "whole numbers separated by commas"),
        ({"levels": "1, 9000"}, "levels", "outside 1 to 4096"),
        ({"requests_per_level": "", "duration": ""}, "requests_per_level", "one of the two"),
        ({"max_tokens": "0"}, "max_tokens", "between 1"),
        ({"instance": ""}, "instance", "required"),
    ],
)
def test_form_errors_are_shown_next_to_their_field(
    client: Client, operator: Any, ready_instance: ServerInstance,
    changes: dict[str, str], field: str, message: str,
) -> None:  # fmt: skip
    client.force_login(operator)
    response = client.post("/sweeps/new/", {**FORM, "instance": ready_instance.pk, **changes})
    assert response.status_code == 400
    page = response.content.decode()
    assert f'data-testid="error-{field}"' in page and message in page
    assert not Sweep.objects.exists()


def test_an_instance_that_is_not_ready_cannot_be_chosen(
    client: Client, operator: Any, ready_instance: ServerInstance
) -> None:
    ServerInstance.objects.filter(pk=ready_instance.pk).update(state="stopped")
    client.force_login(operator)
    response = client.post("/sweeps/new/", {**FORM, "instance": ready_instance.pk})
    assert (
        response.status_code == 400 and 'data-testid="error-instance"' in response.content.decode()
    )


def test_operator_cancels_with_an_htmx_post(
    client: Client, operator: Any, ready_instance: ServerInstance
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1], load=load())
    client.force_login(operator)
    assert client.get(f"/sweeps/{sweep.pk}/cancel/").status_code == 405
    response = client.post(f"/sweeps/{sweep.pk}/cancel/", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert 'id="sweep-actions"' in response.content.decode()
    assert "<html" not in response.content.decode()
    assert Sweep.objects.get().state == SweepState.CANCELLED
    assert Job.objects.get().state == JobState.CANCELLED


def test_detail_page_and_its_htmx_levels_partial(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1, 2], load=load())
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=level_summary_event(0, 1)["summary"])
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert (
        'id="sweep-config"' in page
        and "specdash/sweep.js" in page
        and "vendor/plotly.min.js" in page
    )
    assert 'data-testid="level-row"' in page
    partial = client.get(f"/sweeps/{sweep.pk}/", headers={"HX-Request": "true"}).content.decode()
    assert partial.lstrip().startswith('<div id="levels-table">')
    assert "500.0" in partial and "<html" not in partial
    assert client.get("/sweeps/999/").status_code == 404


def test_exports_csv_json_and_records(
    client: Client, viewer: Any, ready_instance: ServerInstance, data_dir: Path
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1, 2], load=load())
    recording.sweep_begin(sweep_id=sweep.pk)
    for i, c in enumerate([1, 2]):
        recording.sweep_level_finished(
            sweep_id=sweep.pk, summary=level_summary_event(i, c)["summary"]
        )
    client.force_login(viewer)

    response = client.get(f"/sweeps/{sweep.pk}/levels.csv")
    assert response["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [r["concurrency"] for r in rows] == ["1", "2"]
    assert rows[0]["output_tok_s"] == "500.0" and rows[0]["ttft_p99_ms"] == "40.0"
    assert rows[1]["steady_output_tok_s"] == "550.0" and rows[0]["state"] == "completed"
    header = response.content.decode().splitlines()[0].split(",")
    assert header[:5] == ["index", "concurrency", "state", "requests_ok", "requests_failed"]

    data = json.loads(client.get(f"/sweeps/{sweep.pk}/levels.json").content)
    assert data["sweep"]["id"] == sweep.pk and data["sweep"]["load"]["requests_per_level"] == 20
    assert [lv["concurrency"] for lv in data["levels"]] == [1, 2]
    assert data["levels"][0]["summary"]["e2e_ms"]["p50"] == 400.0

    assert client.get(f"/sweeps/{sweep.pk}/records.jsonl").status_code == 404
    records = Path(Sweep.objects.get().records_path)
    assert records.parent.parent == data_dir / "sweeps"
    records.write_text('{"level":0,"id":"a"}\n{"level":1,"id":"b"}\n')
    response = client.get(f"/sweeps/{sweep.pk}/records.jsonl")
    assert response.streaming and response["Content-Type"] == "application/x-ndjson"
    lines = b"".join(response.streaming_content).decode().splitlines()  # type: ignore[attr-defined]
    assert [json.loads(line)["id"] for line in lines] == ["a", "b"]


def test_the_sweep_form_says_why_it_is_refused_while_no_job_worker_is_alive(
    client: Client, operator: Any, ready_instance: ServerInstance, settings: Any
) -> None:
    settings.SPECDASH_WORKER_REQUIRED = True
    client.force_login(operator)
    response = client.post("/sweeps/new/", {**FORM, "instance": ready_instance.pk})
    assert response.status_code == 400
    page = response.content.decode()
    errors = page.split('data-testid="form-errors">', 1)[1].split("</ul>", 1)[0]
    assert "No job worker has reported in the last" in errors, errors
    assert "New servers, sweeps and experiments are refused" in errors
    assert 'data-testid="worker-banner"' in page
    assert not Sweep.objects.exists() and not Job.objects.exists()


def _cell(row: str, testid: str) -> str:
    found = re.search(rf'data-testid="{testid}"[^>]*>(.*?)</td>', row, re.S)
    assert found is not None, testid
    return found.group(1)


def _rows(page: str) -> list[dict[str, Any]]:
    """Each level row's health cells as the page shows them."""
    rows = []
    for row in re.findall(r'<tr data-testid="level-row"(.*?)</tr>', page, re.S):
        warnings = re.findall(r'data-testid="level-health-warning">(.*?)</span>', row)
        rows.append(
            {
                "client_limited": 'data-client-limited="true"' in row,
                "reached": 'data-reached="true"' in row,
                "failed": int(_cell(row, "level-failed")),
                "cancelled": int(_cell(row, "level-cancelled")),
                "achieved": re.sub(r"<[^>]+>", "", _cell(row, "level-achieved")).split(),
                "warnings": [unescape(w) for w in warnings],
            }
        )
    return rows


def test_the_level_table_shows_each_levels_health_from_its_summary(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1, 4, 64], load=load())
    stalled = level_summary_event(0, 1)["summary"]
    stalled["client"] = {"client_limited": True, "warnings": ["event-loop lag p99 31 ms > 20 ms"]}
    failing = level_summary_event(1, 4, ok=15, failed=5)["summary"]
    failing["requests"]["errors_by_cause"] = {"cancelled": 2, "http_500": 3}
    short = level_summary_event(2, 64, ok=8)["summary"]
    short["achieved_concurrency"] = 7.75  # 8 requests never keep 64 in flight
    for summary in (stalled, failing, short):
        recording.sweep_level_finished(sweep_id=sweep.pk, summary=summary)
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert _rows(page) == [
        {
            "client_limited": True, "reached": True, "failed": 0, "cancelled": 0,
            "achieved": ["0.95", "of", "1"],
            "warnings": ["client-limited: event-loop lag p99 31 ms > 20 ms"],
        },
        {
            "client_limited": False, "reached": True, "failed": 3, "cancelled": 2,
            "achieved": ["3.80", "of", "4"], "warnings": ["3 of 20 requests failed"],
        },
        {
            "client_limited": False, "reached": False, "failed": 0, "cancelled": 0,
            "achieved": ["7.75", "of", "64"],
            "warnings": ["C not reached: achieved 7.75 of the asked 64 (below 80%)"],
        },
    ]  # fmt: skip
    # The comparison's decision reads the same summaries the same way.
    levels = SweepLevel.objects.filter(sweep=sweep).order_by("index")
    for level, row in zip(levels, _rows(page), strict=True):
        run = LevelRun(
            sweep.pk, level.index, level.concurrency,
            {"achieved_concurrency": level.achieved_concurrency}, summary=level.summary,
        )  # fmt: skip
        health = arm_health([run])
        assert (health.failed, health.cancelled) == (row["failed"], row["cancelled"])
        assert health.client_limited is row["client_limited"]
        assert health.achieved_concurrency == level.achieved_concurrency
