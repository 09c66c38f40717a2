"""The comparison (page and HTML report) shows what each side's levels recorded of their
workload's phases: reasoning-phase first-token times and ITL, figures per turn and per
session, and one ramp chart per ramped concurrency with every profile's slices; nothing of
them for plain levels."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from benchlib.loadgen.ramp import slice_figures
from benchlib.loadgen.reasoning import reasoning_figures
from benchlib.loadgen.sessions import session_figures, turn_figures
from benchmarks.experiments.level_rows import series_rows
from benchmarks.experiments.level_runs import LevelRun
from benchmarks.sweeps.models import Sweep, SweepLevel
from hosts.models import ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep
from tests.benchmarks.test_sweep_phases_page import (
    PHASE_TESTIDS,
    ramp_records,
    reasoning_records,
    session_records,
)

pytestmark = pytest.mark.django_db


def _phases(slower: float) -> dict[str, Any]:
    """Every phase's figures from the hand-built records, with every time stretched by
    `slower` (the reference answers more slowly than the candidate)."""

    def stretched(records: list[Any]) -> list[Any]:
        for r in records:
            r.start *= slower
            r.end *= slower
            r.first_token *= slower
            r.chunk_times = [t * slower for t in r.chunk_times]
            if r.first_answer is not None:
                r.first_answer *= slower
        return records

    return {
        "reasoning": reasoning_figures(stretched(reasoning_records())),
        "turns": turn_figures(stretched(session_records())),
        "sessions": session_figures(stretched(session_records())),
        "ramp": {
            "strategy": "linear",
            "start_rate": 2.0,
            "end_rate": 4.0,
            "slices": slice_figures(
                stretched(ramp_records()), slices=4, start_rate=2.0, end_rate=4.0, strategy="linear"
            ),
        },
    }


def _pair(make_profile: Callable[..., ServerProfile], tmp_path: Path) -> tuple[Sweep, Sweep]:
    base = make_sweep(make_profile(name="base"), {1: 90, 4: 300}, tmp=tmp_path)
    spec = make_sweep(make_profile(name="spec", speculative=True), {1: 110, 4: 320}, tmp=tmp_path)
    return base, spec


def _cells(html: str, testid: str) -> list[float]:
    return [float(v) for v in re.findall(rf'data-testid="{testid}"[^>]*>([-0-9.]+)<', html)]


def _row(page: str, testid: str, label: str) -> str:
    found = re.findall(rf'<tr data-testid="{testid}" data-concurrency="4" data-label="{label}">.*?</tr>', page, re.S)  # fmt: skip
    assert len(found) == 1, found
    return str(found[0])


def test_the_comparison_shows_each_sides_phase_figures_and_one_ramp_chart_per_level(
    client: Client, operator: Any, make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    base, spec = _pair(make_profile, tmp_path)
    slow, fast = _phases(2.0), _phases(1.0)
    SweepLevel.objects.filter(sweep=base, concurrency=4).update(summary=slow)
    SweepLevel.objects.filter(sweep=spec, concurrency=4).update(summary=fast)
    client.force_login(operator)
    page = client.get(f"/compare/?sweeps={base.pk}&sweeps={spec.pk}").content.decode()

    for label, phases in (("A", slow), ("B", fast)):
        row = _row(page, "comparison-reasoning-row", label)
        reasoning = phases["reasoning"]
        assert _cells(row, "ttft-reasoning-p50") == [
            round(reasoning["ttft_reasoning_ms"]["p50"], 1)
        ]
        assert _cells(row, "ttft-answer-p50") == [round(reasoning["ttft_answer_ms"]["p50"], 1)]
        assert _cells(row, "itl-reasoning-p50") == [round(reasoning["itl_reasoning_ms"]["p50"], 2)]
        assert _cells(row, "itl-answer-p50") == [round(reasoning["itl_answer_ms"]["p50"], 2)]
        # Tokens per chunk per phase: the same chunking on both sides (only the times differ).
        assert _cells(row, "accept-reasoning") == [2.5]
        assert _cells(row, "accept-answer") == [1.0]
        sessions = _row(page, "comparison-session-row", label)
        assert _cells(sessions, "turn-ttft-p50") == [
            round(t["ttft_p50_ms"], 1) for t in phases["turns"]
        ]
        assert _cells(sessions, "session-later-over-first") == [0.2]
    # The reference's times are twice the candidate's.
    assert _cells(_row(page, "comparison-reasoning-row", "A"), "itl-answer-p50") == [20.0]
    assert _cells(_row(page, "comparison-reasoning-row", "B"), "itl-answer-p50") == [10.0]
    assert 'data-concurrency="1" data-label=' not in page  # C=1 is a plain level on both sides

    assert page.count('data-testid="chart-ramp"') == 1 and 'id="chart-ramp-c4"' in page
    found = re.search(r'<script id="comparison-figures" type="application/json">(.*?)</script>', page)  # fmt: skip
    assert found is not None
    figure = json.loads(found.group(1))["ramp-c4"]
    by_name = {trace["name"]: trace for trace in figure["data"]}
    for label, name, phases in (("A", "base", slow), ("B", "spec", fast)):
        slices = phases["ramp"]["slices"]
        prefix = f"{label}: {name}: "
        assert by_name[prefix + "offered req/s"]["y"] == [s["offered_rate"] for s in slices]
        assert by_name[prefix + "output tok/s"]["y"] == [s["output_tok_s"] for s in slices]
        assert by_name[prefix + "TTFT p50 ms"]["y"] == [s["ttft_p50_ms"] for s in slices]
        assert by_name[prefix + "TPOT p50 ms"]["y"] == [s["tpot_p50_ms"] for s in slices]

    report = client.get(f"/compare/report.html?sweeps={base.pk}&sweeps={spec.pk}").content.decode()
    assert _cells(_row(report, "comparison-reasoning-row", "A"), "itl-answer-p50") == [20.0]
    assert 'id="chart-ramp-c4"' in report


def test_a_comparison_of_plain_levels_shows_no_phase_block(
    client: Client, operator: Any, make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    base, spec = _pair(make_profile, tmp_path)
    client.force_login(operator)
    page = client.get(f"/compare/?sweeps={base.pk}&sweeps={spec.pk}").content.decode()
    assert 'data-testid="comparison-table"' in page
    for testid in (*PHASE_TESTIDS, "comparison-reasoning", "comparison-sessions"):
        assert f'data-testid="{testid}"' not in page
    assert "ramp-c" not in page


def test_a_plain_levels_comparison_row_carries_no_phase_keys() -> None:
    # A comparison stored before the phases were kept has none either: an audit's rebuild of
    # it must not find keys it never had.
    plain = LevelRun(sweep_id=1, index=0, concurrency=4, figures={"output_tok_s": 100.0})
    phased = LevelRun(sweep_id=2, index=0, concurrency=4, figures={"output_tok_s": 90.0},
                      summary=_phases(1.0))  # fmt: skip
    assert not {"reasoning", "turns", "sessions", "ramp"} & series_rows([plain])[0].keys()
    assert {"reasoning", "turns", "sessions", "ramp"} <= series_rows([phased])[0].keys()


def test_a_reasoning_row_from_summaries_stored_before_tokens_per_chunk_has_no_such_keys() -> None:
    # The audit rebuilds a stored comparison from its levels' summaries: keys the stored rows
    # never had would read as differences.
    phases = _phases(1.0)
    old = {k: v for k, v in phases["reasoning"].items() if not k.startswith("accept_")}
    before = LevelRun(sweep_id=1, index=0, concurrency=4, figures={"output_tok_s": 100.0},
                      summary={**phases, "reasoning": old})  # fmt: skip
    row = series_rows([before])[0]["reasoning"]
    assert row["ttft_reasoning_p50"] is not None
    assert not {k for k in row if k.startswith("accept_")}
    repeats = [
        LevelRun(sweep_id=sweep, index=0, concurrency=4, figures={"output_tok_s": 90.0},
                 summary=phases)
        for sweep in (2, 3)
    ]  # fmt: skip
    kept = series_rows(repeats)[0]["reasoning"]
    assert (kept["accept_reasoning"], kept["accept_answer"]) == (2.5, 1.0)
    assert (kept["accept_reasoning_per_delivery"], kept["accept_answer_per_delivery"]) == (2.5, 1.0)
    assert (kept["accept_reasoning_chunks"], kept["accept_answer_chunks"]) == (
        8,
        12,
    )  # 4 and 6 a repeat
