"""Legends of the comparison charts stay inside their cards at the page's widths: long arm
names wrap instead of running off the card's edge (where Plotly's SVG cuts them), and the
legend sits under the x axis's title, never over it, also after a resize re-wraps it."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page

from tests.browser.conftest import Dashboard, login

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

# For every chart drawn in a card: the card's box, its x axis title's and its legend entries'.
LEGEND_BOXES = """() => {
  const box = (el) => { const r = el.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  return Array.from(document.querySelectorAll('.card .js-plotly-plot')).map((chart) => ({
    chart: chart.id,
    card: box(chart.closest('.card')),
    xtitle: chart.querySelector('.g-xtitle text') ? box(chart.querySelector('.g-xtitle text')) : null,
    legend: chart.querySelector('.legend .bg') ? box(chart.querySelector('.legend .bg')) : null,
    entries: Array.from(chart.querySelectorAll('.legend .traces')).map(
      (entry) => Object.assign(box(entry), {text: entry.textContent})),
  }));
}"""
# Each arm's name in full somewhere in the legend, whatever the lines it wrapped onto.
NAME_PARTS = ("EAGLE-3 speculative decoding, 5 steps", "without speculation, gpu-box-07",
              "draft-16", "D: short")  # fmt: skip


def _check_legends(page: Page) -> None:
    page.wait_for_timeout(700)  # Plotly lays the legend out after the traces, then it is fitted
    charts: list[dict[str, Any]] = page.evaluate(LEGEND_BOXES)
    drawn = {c["chart"] for c in charts if c["entries"]}
    assert {"chart-throughput", "chart-accept", "chart-ttft", "chart-itl"} <= drawn, drawn
    accept = next(c for c in charts if c["chart"] == "chart-accept")
    assert len(accept["entries"]) == 12  # 3 speculative arms, 2 figures and 2 categories each
    for chart in charts:
        card = chart["card"]
        for entry in chart["entries"]:
            inside = (card["left"] - 0.5 <= entry["left"] and entry["right"] <= card["right"] + 0.5
                      and entry["bottom"] <= card["bottom"] + 0.5)  # fmt: skip
            assert inside, (chart["chart"], entry, card)
            # Within the legend's own box: no entry scrolled out of a capped legend.
            legend = chart["legend"]
            assert (
                legend["top"] - 0.5 <= entry["top"] and entry["bottom"] <= legend["bottom"] + 0.5
            ), (chart["chart"], entry, legend)
            if chart["xtitle"] is not None:
                assert entry["top"] >= chart["xtitle"]["bottom"] - 0.5, (chart["chart"], entry)
    texts = " ".join(e["text"] for c in charts if c["chart"] == "chart-throughput"
                     for e in c["entries"])  # fmt: skip
    for part in NAME_PARTS:
        assert part in texts, texts


def test_no_legend_entry_of_a_comparison_chart_leaves_its_card_or_covers_the_axis_title(
    page: Page, dashboard: Dashboard
) -> None:
    ids = dashboard.manage(
        "shell", "-c", "from tests.browser.legend_data import build; print(build())"
    ).split()[-4:]
    login(page, dashboard)
    url = f"{dashboard.url}/compare/?" + "&".join(f"sweeps={pk}" for pk in ids)
    ready = (
        "() => { const el = document.getElementById('chart-throughput');"
        " return el && el.data && el.data.length === 8; }"
    )
    page.set_viewport_size({"width": 1400, "height": 900})  # three cards a row
    page.goto(url)
    page.wait_for_function(ready)
    _check_legends(page)
    page.set_viewport_size({"width": 1000, "height": 900})  # two a row: the legends re-wrap
    page.wait_for_timeout(1000)  # Plotly's responsive resize runs after the window's
    _check_legends(page)
    page.goto(url)
    page.wait_for_function(ready)
    _check_legends(page)
