"""The sweep page renders what a level recorded of its workload's phases: the reasoning-phase
first-token times and token gaps, the figures per turn and per session of a multi-turn level,
and a ramped level's slices with their chart; a plain level shows none of them. The summaries
are the load generator's own figures (benchlib.loadgen.reasoning, sessions, ramp) over
records built by hand, so the page is checked against what a run would store."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from benchlib.loadgen.ramp import slice_figures
from benchlib.loadgen.reasoning import reasoning_figures
from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.sessions import session_figures, turn_figures
from benchmarks.sweeps import recording, services
from benchmarks.sweeps.models import Sweep
from hosts.models import ServerInstance
from tests.benchlib.loadgen.conftest import make_record
from tests.benchmarks.conftest import level_summary_event, load

pytestmark = pytest.mark.django_db

PHASE_TESTIDS = ("reasoning-table", "turns-table", "session-figures", "ramps", "chart-ramp")


def reasoning_records() -> list[RequestRecord]:
    """Two requests: 6 reasoning tokens in chunks of 1 (the prefill's), 3 and 2, then 3 answer
    tokens one a chunk; a chunk every 10 ms."""
    records = []
    for i, (start, first) in enumerate([(0.0, 0.05), (0.1, 0.25)]):
        tokens = (1, 3, 2, 1, 1, 1)
        chunks = [(start + first + 0.01 * k, n) for k, n in enumerate(tokens)]
        rec = make_record(f"r{i}", start, chunks)
        rec.reasoning_tokens, rec.first_answer = 6, chunks[3][0]
        records.append(rec)
    return records


def session_records() -> list[RequestRecord]:
    """Two sessions of three turns; later turns answer in 40 ms against the first's 200."""
    records = []
    for session in range(2):
        start = 0.0
        for turn in range(3):
            ttft = 0.2 if turn == 0 else 0.04
            rec = make_record(f"s{session}t{turn}", start, [(start + ttft, 4)], start + ttft + 0.1,
                              prompt=100 + 50 * turn)  # fmt: skip
            rec.session, rec.turn = session, turn
            records.append(rec)
            start += ttft + 0.1 + 0.5
    return records


def ramp_records() -> list[RequestRecord]:
    """Arrivals every 0.5 s then every 0.25 s; TTFT rising from 20 to 60 ms."""
    starts = [0.0, 0.5, 1.0, 1.5, 2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75, 4.0]
    return [
        make_record(f"p{i}", s, [(s + 0.02 + 0.01 * (s > 2), 1), (s + 0.1, 3)])
        for i, s in enumerate(starts)
    ]


def _summary(index: int, concurrency: int, **phases: Any) -> Any:
    summary = level_summary_event(index, concurrency)["summary"]
    summary.update(phases)
    return summary


def phase_sweep(instance: ServerInstance) -> tuple[Sweep, dict[str, Any]]:
    """A sweep whose level 0 is plain and level 1 recorded every phase."""
    phases = {
        "reasoning": reasoning_figures(reasoning_records()),
        "turns": turn_figures(session_records()),
        "sessions": session_figures(session_records()),
        "ramp": {
            "strategy": "linear",
            "start_rate": 2.0,
            "end_rate": 4.0,
            "slices": slice_figures(
                ramp_records(), slices=4, start_rate=2.0, end_rate=4.0, strategy="linear"
            ),
        },
    }
    sweep = services.sweep_create(instance=instance, levels=[1, 2], load=load())
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=_summary(0, 1))
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=_summary(1, 2, **phases))
    return sweep, phases


def _cell(html: str, testid: str) -> list[float]:
    return [float(v) for v in re.findall(rf'data-testid="{testid}">([-0-9.]+)<', html)]


def _rows(html: str, testid: str) -> list[str]:
    return re.findall(rf'<tr data-testid="{testid}".*?</tr>', html, flags=re.S)


def test_the_sweep_page_shows_reasoning_turn_session_and_ramp_figures_of_the_level_that_recorded_them(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    sweep, phases = phase_sweep(ready_instance)
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()

    reasoning = _rows(page, "reasoning-row")
    assert len(reasoning) == 1 and 'data-level="1"' in reasoning[0]  # not the plain level
    figures = phases["reasoning"]
    assert _cell(reasoning[0], "ttft-reasoning-p50") == [
        round(figures["ttft_reasoning_ms"]["p50"], 1)
    ]
    assert _cell(reasoning[0], "ttft-answer-p50") == [round(figures["ttft_answer_ms"]["p50"], 1)]
    # 30 ms from the first reasoning token to the first answer token, over 6 tokens; the answer's
    # two gaps of 10 ms.
    assert _cell(reasoning[0], "itl-reasoning-p50") == [5.0]
    assert _cell(reasoning[0], "itl-answer-p50") == [10.0]
    # Tokens per chunk: the reasoning's 3 and 2 after the prefill's chunk, the answer's 1 each.
    assert _cell(reasoning[0], "accept-reasoning") == [2.5]
    assert _cell(reasoning[0], "accept-answer") == [1.0]
    # Its tooltip: the chunks behind it and tokens per delivery (chunks 10 ms apart: the same).
    assert (
        'title="4 chunks; 2.50 tokens per delivery" data-testid="accept-reasoning">' in reasoning[0]
    )
    assert 'title="6 chunks; 1.00 tokens per delivery" data-testid="accept-answer">' in reasoning[0]
    assert _cell(reasoning[0], "ttft-answer-p50")[0] > _cell(reasoning[0], "ttft-reasoning-p50")[0]

    turns = re.search(r'data-testid="turns-table" data-level="1">(.*?)</table>', page, re.S)
    assert turns is not None
    assert _cell(turns.group(1), "turn-ttft-p50") == [200.0, 40.0, 40.0]
    assert _cell(turns.group(1), "turn-prompt-tokens") == [100.0, 150.0, 200.0]
    sessions = re.search(r'data-testid="session-figures" data-level="1">(.*?)</p>', page, re.S)
    assert sessions is not None
    assert sessions.group(1).startswith("2 sessions, 2 with every turn answered")
    assert _cell(sessions.group(1), "session-turns") == [3.0]
    assert _cell(sessions.group(1), "session-later-over-first") == [0.2]  # 40 ms over 200
    # From the first send to the last answer: 0.2 + 0.1 + 0.5, 0.04 + 0.1 + 0.5, 0.04 + 0.1.
    assert _cell(sessions.group(1), "session-duration") == [1.58]

    slices = phases["ramp"]["slices"]
    table = re.search(r'data-testid="ramp-table" data-level="1">(.*?)</table>', page, re.S)
    assert table is not None
    assert _cell(table.group(1), "slice-offered") == [round(s["offered_rate"], 2) for s in slices]
    assert _cell(table.group(1), "slice-arrived") == [round(s["arrival_rate"], 2) for s in slices]
    assert _cell(table.group(1), "slice-ttft-p50") == [round(s["ttft_p50_ms"], 1) for s in slices]
    assert _cell(table.group(1), "slice-tpot-p50") == [round(s["tpot_p50_ms"], 2) for s in slices]
    assert _cell(table.group(1), "slice-offered") == [2.25, 2.75, 3.25, 3.75]
    # The chart: its container, and the figure drawn there carrying the stored slices.
    assert page.count('data-testid="chart-ramp"') == 1 and 'id="chart-ramp-1"' in page
    found = re.search(r'<script id="ramp-figures" type="application/json">(.*?)</script>', page)
    assert found is not None
    figure = json.loads(found.group(1))["ramp-1"]
    by_name = {trace["name"]: trace for trace in figure["data"]}
    assert by_name["offered req/s"]["y"] == [s["offered_rate"] for s in slices]
    assert by_name["arrived req/s"]["y"] == [s["arrival_rate"] for s in slices]
    assert by_name["output tok/s"]["y"] == [s["output_tok_s"] for s in slices]
    assert by_name["TTFT p50 ms"]["y"] == [s["ttft_p50_ms"] for s in slices]
    assert by_name["TPOT p50 ms"]["y"] == [s["tpot_p50_ms"] for s in slices]
    assert by_name["offered req/s"]["x"] == [0.5, 1.5, 2.5, 3.5]  # slice middles
    assert "specdash/ramps.js" in page


def test_a_plain_sweep_shows_no_phase_block(
    client: Client, viewer: Any, ready_instance: ServerInstance
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1], load=load())
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=_summary(0, 1))
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert 'data-testid="levels-table"' in page
    for testid in PHASE_TESTIDS:
        assert f'data-testid="{testid}"' not in page
    assert 'id="ramp-figures"' not in page
