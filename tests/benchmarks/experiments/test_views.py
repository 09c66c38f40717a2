"""Pages and downloads of experiments and comparisons; who may do what."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from benchmarks.experiments import selectors, services
from benchmarks.experiments.models import Experiment, ExperimentState, StepState
from core.models import Job, JobState
from hosts.models import ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep

pytestmark = pytest.mark.django_db

FORM = {
    "levels": "1, 2, 8", "requests_per_level": "10", "input_tokens": "16", "max_tokens": "8",
    "api": "completions", "ignore_eos": "on", "repeats": "2", "order": "interleaved",
    "continue_on_start_failure": "on", "warmup_requests": "0",
}  # fmt: skip


class _Tags(HTMLParser):
    """Script, link and img tags that would load something (script bodies are not parsed)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag in {"script", "img", "iframe"} and names.get("src"):
            self.found.append(f"{tag} {names['src']}")
        if tag == "link" and names.get("href"):
            self.found.append(f"link {names['href']}")


def _external_references(html: str) -> list[str]:
    parser = _Tags()
    parser.feed(html)
    return parser.found


@pytest.fixture
def pair(make_profile: Callable[..., ServerProfile]) -> tuple[ServerProfile, ServerProfile]:
    return make_profile(name="baseline"), make_profile(name="eagle", speculative=True)


@pytest.fixture
def compared(pair: Any, tmp_path: Path) -> tuple[int, int]:
    a = make_sweep(pair[0], {1: 92, 2: 165, 8: 400}, tmp=tmp_path)
    b = make_sweep(pair[1], {1: 96, 2: 150, 8: 260}, tmp=tmp_path, seed=9)
    return a.pk, b.pk


def test_operator_creates_an_experiment_from_the_form(
    client: Client, operator: Any, pair: Any
) -> None:
    client.force_login(operator)
    data = {**FORM, "profile_a": pair[0].pk, "profile_b": pair[1].pk, "tags": "cuda13, fusion"}
    response = client.post("/experiments/new/", data)
    experiment = Experiment.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/experiments/{experiment.pk}/"
    assert experiment.name == "baseline vs eagle" and experiment.created_by == operator
    assert experiment.load["requests_per_level"] == 10 and experiment.levels == [1, 2, 8]
    assert experiment.tags == ["cuda13", "fusion"]
    labels = list(experiment.steps.order_by("index").values_list("arm__label", "repeat"))
    assert labels == [("A", 0), ("B", 0), ("B", 1), ("A", 1)]
    job = Job.objects.get(pk=experiment.job_id or 0)
    assert (job.kind, job.params, job.lock_key) == (
        "experiment.run", {"experiment_id": experiment.pk}, f"experiment:{experiment.pk}",
    )  # fmt: skip
    page = client.get(response["Location"])
    assert page.status_code == 200 and b'data-testid="step-row"' in page.content


def test_the_form_refuses_one_profile_twice_with_one_load_and_a_bad_load(
    client: Client, operator: Any, pair: Any
) -> None:
    client.force_login(operator)
    data = {**FORM, "profile_a": pair[0].pk, "profile_b": pair[0].pk, "requests_per_level": ""}
    response = client.post("/experiments/new/", data)
    assert response.status_code == 400
    assert b"Arms A and B run the same profile (baseline) with the same load" in response.content
    assert b"Give either requests per level or a duration" in response.content
    assert not Experiment.objects.exists()


def test_an_experiment_stores_two_long_tags_sharing_their_first_50_characters_once(
    pair: Any,
) -> None:
    common = "y" * 50
    experiment = services.experiment_create(
        profiles=list(pair), levels=[1], load={"requests_per_level": 5},
        tags=[common + "-a", common + "-b", " short "], repeats=1,
    )  # fmt: skip
    assert experiment.tags == [common, "short"]


def test_a_viewer_reads_but_cannot_create_or_cancel(client: Client, viewer: Any, pair: Any) -> None:
    experiment = services.experiment_create(
        profiles=list(pair), levels=[1], load={"requests_per_level": 5}, repeats=1
    )
    client.force_login(viewer)
    assert client.get("/experiments/new/").status_code == 403
    assert client.post(f"/experiments/{experiment.pk}/cancel/").status_code == 403
    assert client.get(f"/experiments/{experiment.pk}/").status_code == 200
    assert (
        b'data-testid="cancel-experiment"'
        not in client.get(f"/experiments/{experiment.pk}/").content
    )
    experiment.refresh_from_db()
    assert experiment.state == ExperimentState.QUEUED


def test_cancelling_a_queued_experiment_cancels_its_job_and_steps(
    client: Client, operator: Any, pair: Any
) -> None:
    experiment = services.experiment_create(
        profiles=list(pair), levels=[1], load={"requests_per_level": 5}, repeats=1
    )
    client.force_login(operator)
    response = client.post(f"/experiments/{experiment.pk}/cancel/")
    assert response.status_code == 302
    experiment.refresh_from_db()
    assert experiment.state == ExperimentState.CANCELLED
    assert experiment.reason == "cancelled by op before it started"
    assert set(experiment.steps.values_list("state", flat=True)) == {StepState.CANCELLED}
    assert Job.objects.get(pk=experiment.job_id or 0).state == JobState.CANCELLED


def test_the_comparison_page_shows_the_verdict_table_and_charts(
    client: Client, viewer: Any, compared: tuple[int, int]
) -> None:
    a, b = compared
    client.force_login(viewer)
    response = client.get(f"/compare/?sweeps={a}&sweeps={b}")
    body = response.content.decode()
    assert response.status_code == 200
    assert 'data-testid="verdict"' in body and "B (eagle) against A (baseline)" in body
    assert body.count('data-testid="comparison-row"') == 3
    assert 'id="comparison-figures"' in body and 'id="chart-pareto"' in body
    assert "speculation (B (eagle)) on up to C=1, off above" in body
    assert "max_concurrency" in body


def test_the_reference_can_be_chosen_in_the_picker(
    client: Client, viewer: Any, compared: tuple[int, int]
) -> None:
    a, b = compared
    client.force_login(viewer)
    body = client.get(f"/compare/?sweeps={a}&sweeps={b}&reference={b}").content.decode()
    assert "B (baseline) against A (eagle)" in body  # baseline is now the candidate
    picker = client.get(f"/compare/?sweeps={a}").content.decode()
    assert "Pick two or more sweeps." in picker and f'value="{a}" checked' in picker


def test_the_csv_has_one_row_per_level_with_the_ratio_and_its_interval(
    client: Client, viewer: Any, compared: tuple[int, int]
) -> None:
    a, b = compared
    client.force_login(viewer)
    response = client.get(f"/compare/table.csv?sweeps={a}&sweeps={b}")
    assert response["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [r["concurrency"] for r in rows] == ["1", "2", "8"]
    assert float(rows[2]["A_output_tok_s"]) == 400 and float(rows[2]["B_output_tok_s"]) == 260
    assert float(rows[2]["B/A_low"]) < float(rows[2]["B/A_ratio"]) < float(rows[2]["B/A_high"])
    assert rows[0]["B/A_method"] == "batch-means-log-t"


def test_the_html_report_is_self_contained(
    client: Client, viewer: Any, compared: tuple[int, int]
) -> None:
    a, b = compared
    client.force_login(viewer)
    response = client.get(f"/compare/report.html?sweeps={a}&sweeps={b}")
    html = response.content.decode()
    assert response.status_code == 200
    assert "attachment" in response["Content-Disposition"]
    assert _external_references(html) == []  # nothing to fetch: it opens offline
    assert html.count("Plotly.newPlot") == 6 and "plotly.js v" in html.lower()
    assert len(html) > 3_000_000  # the Plotly bundle itself is inlined
    assert "B (eagle) against A (baseline)" in html and 'data-testid="comparison-table"' in html


def test_an_experiment_comparison_and_its_downloads_are_served(
    client: Client, viewer: Any, pair: Any, tmp_path: Path
) -> None:
    experiment = services.experiment_create(
        profiles=list(pair), levels=[1, 8], load={"requests_per_level": 5}, repeats=1
    )
    for step in experiment.steps.select_related("arm"):
        values = {1: 92, 8: 400} if step.arm.label == "A" else {1: 96, 8: 260}
        make_sweep(step.arm.profile, values, tmp=tmp_path, step=step)
    client.force_login(viewer)
    page = client.get(f"/experiments/{experiment.pk}/comparison/").content.decode()
    assert (
        "B (eagle) against A (baseline)" in page
        and f"/experiments/{experiment.pk}/report.html" in page
    )
    assert client.get(f"/experiments/{experiment.pk}/comparison.csv").status_code == 200
    assert client.get(f"/experiments/{experiment.pk}/report.html").status_code == 200


def test_the_history_page_lists_a_profiles_sweeps(
    client: Client, viewer: Any, pair: Any, tmp_path: Path
) -> None:
    make_sweep(pair[0], {1: 90, 8: 400}, tmp=tmp_path, records=False)
    make_sweep(pair[0], {1: 93, 8: 410}, tmp=tmp_path, records=False)
    client.force_login(viewer)
    body = client.get(f"/compare/history/{pair[0].pk}/").content.decode()
    assert body.count('<tr><td><a href="/sweeps/') == 2
    assert "93.0" in body and 'id="history-figure"' in body
    assert client.get("/compare/history/999999/").status_code == 404


def test_the_history_page_and_the_picker_say_when_they_cut_the_list(
    client: Client, viewer: Any, pair: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for tok_s in (90, 91, 92):
        make_sweep(pair[0], {1: tok_s, 8: 400}, tmp=tmp_path, records=False)
    client.force_login(viewer)
    assert "list-cut" not in client.get(f"/compare/history/{pair[0].pk}/").content.decode()
    monkeypatch.setattr(selectors, "LIST_LIMIT", 2)
    body = client.get(f"/compare/history/{pair[0].pk}/").content.decode()
    assert body.count('<tr><td><a href="/sweeps/') == 2
    assert "The newest 2 of 3 sweeps with a completed level." in body
    assert "The newest 2 of 3 finished sweeps" in client.get("/compare/").content.decode()
