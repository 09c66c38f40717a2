"""Long legend entries wrap onto lines a half-width card holds, keeping every character, and
the figure's bottom margin makes room for the lines (the browser test checks the drawing)."""

from __future__ import annotations

import pytest

from benchmarks.charts import (
    LEGEND_LINE_CHARS,
    legend_below,
    legend_height_px,
    legend_label,
)

NAMES = [
    "A: Llama-3.1-70B-Instruct on SGLang 0.4.6 with EAGLE-3 speculative decoding, 5 steps",
    "C: meta-llama/Llama-3.1-8B-Instruct__sglang-0.4.6__eagle3__num-steps-5__topk-8__draft-16",
    "x" * 130,
    "B: short",
]


@pytest.mark.parametrize("name", NAMES)
def test_a_label_wraps_to_lines_a_card_holds_and_keeps_the_whole_name(name: str) -> None:
    lines = legend_label(name).split("<br>")
    assert all(len(line) <= LEGEND_LINE_CHARS for line in lines), lines
    assert "".join(lines).replace(" ", "") == name.replace(" ", "")


def test_words_break_at_spaces_and_a_long_token_after_its_separators() -> None:
    assert legend_label(NAMES[0]).split("<br>") == [
        "A: Llama-3.1-70B-Instruct on SGLang 0.4.6 with",
        "EAGLE-3 speculative decoding, 5 steps",
    ]
    # The model path starts on the label's first line and breaks after a separator.
    first, *rest = legend_label(NAMES[1]).split("<br>")
    assert first.startswith("C: meta-llama/") and first[-1] in "/_-.,:="
    assert rest[-1].endswith("draft-16")
    assert legend_label("B: short") == "B: short"


def test_the_bottom_margin_grows_with_the_wrapped_lines() -> None:
    short = legend_below({"data": [{"name": "B: short"}], "layout": {}})
    long = legend_below({"data": [{"name": NAMES[0]}], "layout": {}})
    assert long["data"][0]["name"] == legend_label(NAMES[0])
    grown = long["layout"]["margin"]["b"] - short["layout"]["margin"]["b"]
    assert grown == legend_height_px([legend_label(NAMES[0])]) - legend_height_px(["B: short"])
    assert grown > 0
    # The plot keeps its height: the figure grows by what the legend took.
    for fig in (short, long):
        layout = fig["layout"]
        assert layout["height"] - layout["margin"]["t"] - layout["margin"]["b"] == 240
    assert long["layout"]["legend"]["xref"] == "container"
