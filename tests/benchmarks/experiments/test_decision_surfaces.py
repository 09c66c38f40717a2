"""One decision, every surface: the comparison page, the HTML report, the CSV, the REST API and
``manage.py specdash compare`` print exactly the statements of the comparison's decision
object (benchlib/stats/decision.py), for each kind of answer it can give."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management.base import OutputWrapper
from django.test import Client

from benchlib.stats.decision import WITHIN_RUN
from benchmarks.experiments import recording, services
from benchmarks.experiments.models import Experiment, ExperimentState
from benchmarks.sweeps.models import SweepLevel
from hosts.models import ServerProfile
from specdash.management.commands.specdash import Command
from tests.benchmarks.experiments.constructed import make_sweep
from tests.fixtures.statements import csv_statements, html_statements, normalized

pytestmark = pytest.mark.django_db

# name: (A's tok/s, B's tok/s, jitter, records, the statuses the decision must give)
SCENARIOS: dict[str, tuple[dict[int, float], dict[int, float], float, bool, list[str]]] = {
    "ahead-then-behind": (
        {1: 100, 2: 100, 8: 100},
        {1: 130, 2: 125, 8: 60},
        0.05,
        True,
        ["ahead", "ahead", "behind"],
    ),
    "all-ahead": ({1: 100, 8: 100}, {1: 130, 8: 125}, 0.05, True, ["ahead", "ahead"]),
    "all-equivalent": (
        {1: 100, 8: 100},
        {1: 100.2, 8: 99.9},
        0.001,
        True,
        ["equivalent", "equivalent"],
    ),
    "inconclusive": ({1: 100, 8: 100}, {1: 104, 8: 97}, 0.4, True, ["inconclusive"] * 2),
    "no-interval": ({1: 100, 2: 100.5}, {1: 100.5, 2: 99.7}, 0.05, False, ["inconclusive"] * 2),
}


class _ApiClient:
    """Stands in for SpecdashClient: answers the command's requests from the test client and
    records the paths it was asked for."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.asked: list[str] = []

    def request(self, method: str, path: str, params: list[tuple[str, Any]]) -> Any:
        self.asked.append(path)
        query = "&".join(f"{k}={v}" for k, v in params)
        response = self.client.get(f"/api/v1{path}?{query}")
        assert response.status_code == 200, response.content
        return response.json()


def _cli_lines(client: Client, sweeps: tuple[int, int]) -> list[str]:
    command = Command()
    out = io.StringIO()
    command.stdout = OutputWrapper(out)
    api = _ApiClient(client)
    command._compare(api, {"experiment": None, "sweeps": list(sweeps), "json": False})  # type: ignore[arg-type, typeddict-item]
    assert api.asked == ["/comparisons"]
    return out.getvalue().splitlines()


@pytest.fixture
def pair(make_profile: Callable[..., ServerProfile]) -> tuple[ServerProfile, ServerProfile]:
    return make_profile(name="baseline"), make_profile(
        name="eagle", speculative=True, engine="llamacpp"
    )


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_surface_prints_the_decision(
    scenario: str, pair: Any, tmp_path: Path, client: Client, viewer: Any
) -> None:
    a_values, b_values, jitter, records, statuses = SCENARIOS[scenario]
    a = make_sweep(pair[0], a_values, tmp=tmp_path, jitter=jitter, records=records)
    b = make_sweep(pair[1], b_values, tmp=tmp_path, jitter=jitter, records=records, seed=5)
    client.force_login(viewer)
    query = f"sweeps={a.pk}&sweeps={b.pk}"

    api = client.get(f"/api/v1/comparisons?sweep={a.pk}&sweep={b.pk}").json()
    (verdict,) = api["verdicts"]
    decision = verdict["decision"]
    assert [lv["status"] for lv in decision["levels"]] == statuses
    statements = normalized(decision["statements"])
    assert verdict["text"] == " ".join(decision["statements"])
    # The one line on why, from the level rows' latency medians (the constructed sweeps give
    # B an ITL of C/tok_s and both arms the same TTFT), is a statement like every other.
    assert decision["why"] in decision["statements"]
    if scenario == "ahead-then-behind":
        assert decision["why"] == (
            "Why: at C=1 against A (baseline), B (eagle)'s ITL p50 is 23% lower and its TTFT "
            "p50 is equal (within 0.5%); on output throughput it is ahead up to C=2 and behind "
            "from C=8."
        )

    page = client.get(f"/compare/?{query}").content.decode()
    assert html_statements(page) == statements
    cells = html_statements(page, "ratio")
    assert len(cells) == len(statuses)
    report = client.get(f"/compare/report.html?{query}").content.decode()
    assert html_statements(report) == statements

    csv_text = client.get(f"/compare/table.csv?{query}").content.decode()
    assert csv_statements(csv_text, "B/A") == [
        (lv["concurrency"], lv["status"], lv["sentence"]) for lv in decision["levels"]
    ]

    lines = _cli_lines(client, (a.pk, b.pk))
    assert lines[0].startswith("B vs A: C=")
    assert lines[1 : 1 + len(statements)] == decision["statements"]

    # One run per arm with its requests: batch-means intervals, and every surface says that
    # they leave out run-to-run variance (the statements above are the decision's).
    assert decision["within_run"] == records
    if records:
        assert all(WITHIN_RUN in lv["sentence"] for lv in decision["levels"])
        assert WITHIN_RUN in decision["summary"] and WITHIN_RUN in lines[1]
        assert all(WITHIN_RUN in sentence for _, _, sentence in csv_statements(csv_text, "B/A"))

    # The ratio chart plots the decision's ratios, with their statuses and the margin band.
    figures = json.loads(
        page.split('id="comparison-figures" type="application/json">', 1)[1].split("</script>")[0]
    )
    (trace,) = figures["ratio"]["data"]
    assert trace["y"] == [lv["ratio"]["point"] for lv in decision["levels"]]
    assert trace["text"] == [s.replace("_", " ") for s in statuses]
    band = figures["ratio"]["layout"]["shapes"][1]
    assert (band["y0"], band["y1"]) == pytest.approx((1 / 1.02, 1.02))

    # The ratio cells are coloured by the status and by nothing else.
    for status in ("ahead", "behind", "equivalent", "inconclusive"):
        assert page.count(f'data-testid="ratio" data-status="{status}"') == statuses.count(status)


def test_the_recommendation_names_the_engine_and_no_surface_writes_its_own(
    pair: Any, tmp_path: Path, client: Client, viewer: Any
) -> None:
    a = make_sweep(pair[0], {1: 100, 2: 100, 8: 100}, tmp=tmp_path, jitter=0.05)
    b = make_sweep(pair[1], {1: 130, 2: 125, 8: 60}, tmp=tmp_path, jitter=0.05, seed=5)
    client.force_login(viewer)
    page = client.get(f"/compare/?sweeps={a.pk}&sweeps={b.pk}").content.decode()
    recommendation = html_statements(page)[-1]
    assert recommendation.startswith("Recommendation: speculation (B (eagle)) on up to C=2")
    assert "--spec-type none on the server for loads above C=2" in recommendation
    assert "margin ±2%, 95% confidence" in recommendation
    for phrase in ("faster", "slower", "keep it on", "Disable speculation above"):
        assert phrase not in page
    # The verdict's advice fields are read from the decision too.
    (verdict,) = client.get(f"/api/v1/comparisons?sweep={a.pk}&sweep={b.pk}").json()["verdicts"]
    assert verdict["disable_speculation_above"] == 2
    assert verdict["engine_options"] == verdict["decision"]["engine_options"]
    assert {o["engine"] for o in verdict["engine_options"]} == {"llama.cpp"}


def test_a_fixed_request_rate_is_decided_on_latency(
    pair: Any, tmp_path: Path, client: Client, viewer: Any
) -> None:
    # The pair: at 3 req/s B/A throughput is 1.030 (the offered rate), while B's TPOT
    # is half of A's. The answer is about latency, about 2x, never "3% faster".
    a = make_sweep(pair[0], {1: 100.0, 4: 100.0}, tmp=tmp_path, jitter=0.01)
    b = make_sweep(pair[1], {1: 103.0, 4: 103.0}, tmp=tmp_path, jitter=0.01, seed=5)
    for sweep, tpot in ((a, 20.2), (b, 10.2)):
        SweepLevel.objects.filter(sweep=sweep).update(
            summary={"mode": "rate", "target_rate": 3.0}, tpot_p50_ms=tpot
        )
    client.force_login(viewer)
    api = client.get(f"/api/v1/comparisons?sweep={a.pk}&sweep={b.pk}").json()
    decision = api["verdicts"][0]["decision"]
    assert decision["rate_mode"] and decision["figure"]["key"] == "tpot_p50_ms"
    for level in decision["levels"]:
        assert level["ratio"]["point"] == pytest.approx(20.2 / 10.2)
        assert "TPOT p50 1.980x" in level["sentence"]
    assert "fixed request rate" in decision["summary"]
    page = client.get(f"/compare/?sweeps={a.pk}&sweeps={b.pk}").content.decode()
    assert html_statements(page) == normalized(decision["statements"])
    assert "1.030" not in " ".join(html_statements(page)) and "faster" not in page


def test_a_finished_experiment_says_its_stored_decision_everywhere(
    pair: Any, tmp_path: Path, client: Client, viewer: Any
) -> None:
    # Three repeats per arm, interleaved: intervals over the runs (no within-run caveat).
    experiment = services.experiment_create(
        profiles=list(pair), levels=[1, 8], load={"requests_per_level": 40}, repeats=3,
        order="interleaved",
    )  # fmt: skip
    values = {"A": [{1: 100, 8: 500}, {1: 101, 8: 505}, {1: 99, 8: 495}],
              "B": [{1: 130, 8: 250}, {1: 128, 8: 252}, {1: 131, 8: 248}]}  # fmt: skip
    for step in experiment.steps.select_related("arm__profile"):
        make_sweep(step.arm.profile, values[step.arm.label][step.repeat], tmp=tmp_path, step=step)
    recording.experiment_store_comparison(experiment_id=experiment.pk)
    Experiment.objects.filter(pk=experiment.pk).update(state=ExperimentState.COMPLETED)
    client.force_login(viewer)
    base = f"/experiments/{experiment.pk}"

    api = client.get(f"/api/v1{base}/comparison").json()
    decision = api["verdicts"][0]["decision"]
    assert [(lv["status"], lv["repeats"]) for lv in decision["levels"]] == [
        ("ahead", 3),
        ("behind", 3),
    ]
    assert not decision["within_run"]
    assert "on up to C=1, off above" in decision["recommendation"]
    statements = normalized(decision["statements"])

    assert html_statements(client.get(f"{base}/").content.decode()) == statements
    comparison_page = client.get(f"{base}/comparison/").content.decode()
    assert html_statements(comparison_page) == statements
    # The pooled between-run interval is labelled as repeats, never as within-run.
    assert 'title="repeats-pooled-log-t">(repeats)' in comparison_page
    assert "within-run" not in " ".join(html_statements(comparison_page))
    assert html_statements(client.get(f"{base}/report.html").content.decode()) == statements
    csv_text = client.get(f"{base}/comparison.csv").content.decode()
    assert csv_statements(csv_text, "B/A") == [
        (lv["concurrency"], lv["status"], lv["sentence"]) for lv in decision["levels"]
    ]

    class _Get(_ApiClient):
        def get(self, path: str) -> Any:
            self.asked.append(path)
            return self.client.get(f"/api/v1{path}").json()

    command = Command()
    out = io.StringIO()
    command.stdout = OutputWrapper(out)
    fake = _Get(client)
    command._compare(fake, {"experiment": experiment.pk, "sweeps": [], "json": False})  # type: ignore[arg-type, typeddict-item]
    assert fake.asked == [f"{base}/comparison"]
    assert out.getvalue().splitlines()[1:] == decision["statements"]


def test_level_health_from_the_summaries_makes_levels_not_comparable(
    pair: Any, tmp_path: Path, client: Client, viewer: Any
) -> None:
    a = make_sweep(pair[0], {1: 100, 2: 100, 4: 100, 64: 100}, tmp=tmp_path, jitter=0.05)
    b = make_sweep(pair[1], {1: 130, 2: 130, 4: 130, 64: 130}, tmp=tmp_path, jitter=0.05, seed=5)
    levels = SweepLevel.objects.filter(sweep=b)
    levels.filter(concurrency=2).update(
        summary={"client": {"client_limited": True, "warnings": ["client CPU 97% > 90%"]}}
    )
    levels.filter(concurrency=4).update(
        summary={"requests": {"total": 40, "failed": 12, "errors_by_cause": {"cancelled": 10}}}
    )  # 2 failed of 40 (5%): the cancelled ones are not failures
    levels.filter(concurrency=64).update(achieved_concurrency=7.75)
    client.force_login(viewer)
    api = client.get(f"/api/v1/comparisons?sweep={a.pk}&sweep={b.pk}").json()
    decision = api["verdicts"][0]["decision"]
    assert [(lv["concurrency"], lv["status"], lv["reason"]) for lv in decision["levels"]] == [
        (1, "ahead", "the interval lies above 1"),
        (2, "not_comparable",
         "B (eagle)'s load generator was the bottleneck (client-limited: client CPU 97% > 90%)"),
        (4, "not_comparable",
         "5.0% of B (eagle)'s requests failed (2 of 40; the limit is 1%)"),
        (64, "not_comparable", "B (eagle) reached C=7.75, below 80% of the asked C=64"),
    ]  # fmt: skip
    page = client.get(f"/compare/?sweeps={a.pk}&sweeps={b.pk}").content.decode()
    assert html_statements(page) == normalized(decision["statements"])
    assert page.count('data-testid="ratio" data-status="not_comparable"') == 3
    # The table shows the health the decision judged from, beside each series' figures.
    rows = re.findall(
        r'<tr data-testid="comparison-row" data-concurrency="(\d+)">(.*?)</tr>', page, re.S
    )
    shown = {}
    for c, row in rows:
        cells = re.findall(
            r'data-testid="cell-health" data-failed="(\d+)" data-cancelled="(\d+)" '
            r'data-client-limited="(true|false)">(.*?)</td>',
            row,
            re.S,
        )
        achieved = [
            re.sub(r"<[^>]+>", "", a).split()
            for a in re.findall(r'data-testid="cell-achieved">(.*?)</td>', row, re.S)
        ]
        shown[int(c)] = [
            (int(f), int(x), lim == "true", re.findall(r'cell-health-warning">(.*?)</span>', w), ac)
            for (f, x, lim, w), ac in zip(cells, achieved, strict=True)
        ]
    assert shown[2][1][2] is True and shown[2][1][3] == ["client-limited: client CPU 97% &gt; 90%"]
    assert shown[4][1][:2] == (2, 10) and shown[4][1][3] == ["2 of 40 requests failed"]
    assert shown[64][1][4] == ["7.75", "of", "64"]
    assert shown[64][1][3] == ["C not reached: achieved 7.75 of the asked 64 (below 80%)"]
    # The reference series is healthy at every level: no warning, nothing failed.
    assert all(cells[0][:4] == (0, 0, False, []) for cells in shown.values())
    stored = {row["concurrency"]: row["cells"][1]["health"] for row in api["rows"]}
    assert (stored[4]["failed"], stored[4]["cancelled"], stored[64]["reached"]) == (2, 10, False)
    # The HTML report carries the same table, health included.
    report = client.get(f"/compare/report.html?sweeps={a.pk}&sweeps={b.pk}").content.decode()
    for warning in ("client-limited: client CPU 97% &gt; 90%", "2 of 40 requests failed",
                    "C not reached: achieved 7.75 of the asked 64 (below 80%)"):  # fmt: skip
        assert f'data-testid="cell-health-warning">{warning}</span>' in report


def _every_surface(client: Client, a: Any, b: Any) -> dict[str, Any]:
    """The decision from the API, after checking the page, the HTML report, the CSV and the
    CLI print exactly its statements."""
    query = f"sweeps={a.pk}&sweeps={b.pk}"
    decision: dict[str, Any] = client.get(f"/api/v1/comparisons?sweep={a.pk}&sweep={b.pk}").json()[
        "verdicts"
    ][0]["decision"]
    statements = normalized(decision["statements"])
    assert html_statements(client.get(f"/compare/?{query}").content.decode()) == statements
    report = client.get(f"/compare/report.html?{query}").content.decode()
    assert html_statements(report) == statements
    csv_text = client.get(f"/compare/table.csv?{query}").content.decode()
    assert csv_statements(csv_text, "B/A") == [
        (lv["concurrency"], lv["status"], lv["sentence"]) for lv in decision["levels"]
    ]
    lines = _cli_lines(client, (a.pk, b.pk))
    assert lines[1 : 1 + len(statements)] == decision["statements"]
    return decision


def test_sweeps_of_different_workloads_are_not_comparable_on_every_surface(
    pair: Any, tmp_path: Path, client: Client, viewer: Any
) -> None:
    a = make_sweep(pair[0], {1: 100, 8: 100}, tmp=tmp_path, jitter=0.05)
    b = make_sweep(pair[1], {1: 130, 8: 60}, tmp=tmp_path, jitter=0.05, seed=5)
    load = {"api": "completions", "input_tokens": 128, "max_tokens": 32, "duration": 4.0}
    a.load = {**load, "model": "base.gguf"}
    b.load = {**load, "max_tokens": 256, "duration": 8.0, "model": "eagle.gguf"}
    a.save(update_fields=["load"])
    b.save(update_fields=["load"])
    client.force_login(viewer)
    decision = _every_surface(client, a, b)
    # The length asked differs; the duration (sizing) and the model name (each server's) do not
    # count as the workload.
    reason = (
        "the two arms ran different workloads (max_tokens differ between A (baseline) and "
        "B (eagle))"
    )
    assert [(lv["status"], lv["reason"]) for lv in decision["levels"]] == [
        ("not_comparable", reason)
    ] * 2
    b.load = {**load, "duration": 8.0, "model": "eagle.gguf"}
    b.save(update_fields=["load"])
    decision = _every_surface(client, a, b)
    assert [lv["status"] for lv in decision["levels"]] == ["ahead", "behind"]


def test_a_starved_load_source_makes_its_level_not_comparable_on_every_surface(
    pair: Any, tmp_path: Path, client: Client, viewer: Any
) -> None:
    a = make_sweep(pair[0], {1: 100, 8: 100}, tmp=tmp_path, jitter=0.05)
    b = make_sweep(pair[1], {1: 130, 8: 130}, tmp=tmp_path, jitter=0.05, seed=5)
    why = "37 of 240 arrivals sent over 10 ms after their schedule (p99 48 ms)"
    SweepLevel.objects.filter(sweep=b, concurrency=8).update(
        summary={"client": {"client_limited": False, "warnings": [], "load_source_starved": True,
                            "starved_reason": why}}
    )  # fmt: skip
    client.force_login(viewer)
    decision = _every_surface(client, a, b)
    assert [(lv["concurrency"], lv["status"], lv["reason"]) for lv in decision["levels"]] == [
        (1, "ahead", "the interval lies above 1"),
        (8, "not_comparable", f"B (eagle)'s load source fell behind (starved: {why})"),
    ]
    # The page and the report show it beside the level's figures, as the other health lines.
    for path in ("/compare/", "/compare/report.html"):
        html = client.get(f"{path}?sweeps={a.pk}&sweeps={b.pk}").content.decode()
        assert f'data-testid="cell-health-warning">load source starved: {why}</span>' in html
