"""An operator creates an A/B experiment of the two seeded simulated servers from the form,
watches it run unattended (steps, live sweep chart, no reload), and reads the verdict on
the comparison page (saved as the README's screenshot with SPECDASH_SCREENSHOTS=1)."""

from __future__ import annotations

import os

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ROOT, Dashboard, login

pytestmark = pytest.mark.browser

BASELINE = "Simulated SGLang baseline"
EAGLE = "Simulated SGLang EAGLE-3"
SCREENSHOT = ROOT / "docs" / "screenshots" / "comparison.png"


def _option_value(page: Page, select: str, label_start: str) -> str:
    return str(page.eval_on_selector(
        select,
        "(el, start) => Array.from(el.options).find(o => o.text.startsWith(start)).value",
        label_start,
    ))  # fmt: skip


def test_operator_runs_an_experiment_and_reads_the_verdict(
    page: Page, dashboard: Dashboard
) -> None:
    login(page, dashboard)
    page.goto(dashboard.url + "/experiments/")
    page.get_by_test_id("new-experiment").click()
    page.select_option(
        "select[name=profile_a]", _option_value(page, "select[name=profile_a]", BASELINE)
    )
    page.select_option(
        "select[name=profile_b]", _option_value(page, "select[name=profile_b]", EAGLE)
    )
    page.fill("input[name=name]", "EAGLE-3 vs baseline, browser")
    page.fill("input[name=levels]", "1, 2, 4")
    page.fill("input[name=requests_per_level]", "8")
    page.fill("input[name=input_tokens]", "32")
    page.fill("input[name=max_tokens]", "32")
    page.check("input[name=check_output_equivalence]")
    page.fill("input[name=tags]", "browser, simulator")
    page.get_by_test_id("launch-experiment").click()
    page.wait_for_url(f"{dashboard.url}/experiments/*/")
    page.evaluate("window.__noReload = true")

    # It progresses on its own: a step starts, then a sweep runs and is charted live.
    expect(page.get_by_test_id("experiment-state")).to_have_text("Running", timeout=30_000)
    expect(page.locator("[data-testid=step-row][data-state=sweeping]")).to_have_count(
        1, timeout=60_000
    )
    page.wait_for_function(
        "() => { const el = document.getElementById('chart-live');"
        " return el && el.data && el.data[0].x.length >= 1; }",
        timeout=60_000,
    )
    expect(page.get_by_test_id("current-sweep")).to_contain_text("sweep #")
    # The default protocol, A B B A: four steps end done, each server stopped (verified)
    # before the next started.
    expect(page.locator("[data-testid=step-row][data-state=done]")).to_have_count(
        4, timeout=240_000
    )
    expect(page.get_by_test_id("experiment-state")).to_have_text("Completed", timeout=60_000)
    assert page.evaluate("window.__noReload === true")
    expect(page.get_by_test_id("steps-table")).to_contain_text("stopped")
    expect(page.get_by_test_id("verdict")).to_contain_text(f"B ({EAGLE}) against A ({BASELINE})")

    page.get_by_test_id("open-comparison").click()
    page.wait_for_url(f"{dashboard.url}/experiments/*/comparison/")
    expect(page.get_by_test_id("verdict")).to_contain_text(f"B ({EAGLE}) against A ({BASELINE})")
    # At C=4 the baseline is ~1.35x ahead in the model: behind, unless the load generator was
    # the bottleneck on a loaded machine, which the level then says instead.
    c4 = page.locator("[data-testid=statement][data-kind=level][data-concurrency='4']")
    expect(c4).to_contain_text(f"C=4: B ({EAGLE})")
    if c4.get_attribute("data-status") == "not_comparable":
        expect(c4).to_contain_text("client-limited")
    else:
        expect(c4).to_have_attribute("data-status", "behind")
    expect(page.get_by_test_id("saturation").first).to_contain_text(
        "A: not saturated in the tested range"
    )
    expect(page.get_by_test_id("equivalence-ok")).to_be_visible()
    expect(page.locator("[data-testid=comparison-row]")).to_have_count(3)
    page.wait_for_function("() => document.getElementById('chart-throughput').data.length === 4")
    # Beside throughput, the speculative figures per level of the speculative profile only (from
    # its server's /metrics differences over each level), between 1 and 1 + its 3 draft steps.
    page.wait_for_function(
        "() => { const el = document.getElementById('chart-accept');"
        " return el && el.data && el.data.length >= 1; }"
    )
    traces = page.evaluate(
        # A long legend entry wraps onto lines (figures.py, legend_label): read as one line.
        "() => document.getElementById('chart-accept').data"
        ".map(d => [d.name.replaceAll('<br>', ' '), d.y])"
    )
    # Both speculative figures from the server's counters (SGLang: every decode step verifies,
    # so both are (generated - requests) / verify calls), then per prompt category from the
    # requests' own figures (the sweep asks the simulator, as SGLang, for them; every prompt
    # here is synthetic).
    assert [name for name, _ in traces] == [
        f"B: {EAGLE} accept length per drafted step",
        f"B: {EAGLE} tokens per engine step",
        f"B: {EAGLE} · synthetic",
    ]
    assert traces[0][1] == traces[1][1]
    assert all(1.0 < y < 4.0 for _, ys in traces for y in ys), traces
    expect(page.locator("[data-testid=acceptance-row]")).to_have_count(3)
    # Plotly's modebar offers PNG and, added by the page, SVG.
    page.hover("#chart-throughput")
    expect(page.locator("#chart-throughput [data-title='Download plot as SVG']")).to_have_count(1)
    with page.expect_download() as download:
        page.get_by_test_id("download-csv").click()
    assert download.value.suggested_filename.endswith("-comparison.csv")
    if os.environ.get("SPECDASH_SCREENSHOTS"):  # refreshes the README's picture on request
        page.screenshot(path=str(SCREENSHOT), full_page=True)
        assert SCREENSHOT.stat().st_size > 20_000


# An experiment whose worker died before it ran a step: what the interrupt hook leaves.
_INTERRUPTED = """
from django.db import transaction
from benchmarks.experiments import services
from hosts.models import ServerProfile
from core.models import Job, JobState
profiles = [ServerProfile.objects.get(name=n) for n in ({a!r}, {b!r})]
with transaction.atomic():
    e = services.experiment_create(profiles=profiles, levels=[1, 2], name="resumed in browser",
        load={{"requests_per_level": 4, "max_tokens": 16, "input_tokens": 16}}, repeats=1)
    Job.objects.filter(pk=e.job_id).update(state=JobState.INTERRUPTED, error="worker gone")
    services.experiment_on_interrupted(e.job_id, {{"experiment_id": e.pk}})
print(e.pk)
"""


def test_resume_on_an_interrupted_experiments_page_and_the_timeline_continues_live(
    page: Page, dashboard: Dashboard
) -> None:
    experiment_id = int(
        dashboard.manage("shell", "-c", _INTERRUPTED.format(a=BASELINE, b=EAGLE)).split()[-1]
    )
    login(page, dashboard)
    page.goto(f"{dashboard.url}/experiments/{experiment_id}/")
    expect(page.get_by_test_id("experiment-state")).to_have_text("Interrupted")
    history = page.get_by_test_id("experiment-history")
    expect(history.locator("li[data-event=interrupted]")).to_contain_text("worker gone")
    expect(page.locator("[data-testid=step-row][data-state=pending]")).to_have_count(2)

    page.get_by_test_id("resume-experiment").click()
    page.wait_for_url(f"{dashboard.url}/experiments/{experiment_id}/")
    page.evaluate("window.__noReload = true")
    expect(history.locator("li[data-event=resumed]")).to_contain_text("by operator")
    expect(page.get_by_test_id("resume-experiment")).to_have_count(0)
    # From here on the page follows it without a reload: steps start, sweep and finish.
    expect(page.locator("[data-testid=step-row][data-state=sweeping]")).to_have_count(
        1, timeout=60_000
    )
    expect(page.locator("[data-testid=step-row][data-state=done]")).to_have_count(
        2, timeout=120_000
    )
    expect(page.get_by_test_id("experiment-state")).to_have_text("Completed", timeout=60_000)
    assert page.evaluate("window.__noReload === true")
    expect(page.get_by_test_id("verdict")).to_contain_text(f"B ({EAGLE}) against A ({BASELINE})")
