"""Trace replay: each loader against a small file in its published format, the window and the
speed, prompts of the recorded lengths sharing blocks where hash ids repeat, and a replayed
level whose requests go out at the trace's times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchlib.loadgen import cli
from benchlib.loadgen.apis import Api
from benchlib.loadgen.cli_args import build_parser
from benchlib.loadgen.events import EventWriter
from benchlib.loadgen.level import run_level
from benchlib.loadgen.level_config import LevelConfig
from benchlib.loadgen.settings import LoadSettings, LoadSettingsError
from benchlib.loadgen.traces import (
    Trace,
    TraceError,
    TracePrompts,
    TraceRequest,
    load_trace,
)
from benchlib.stats.intervals import quantile
from tests.benchlib.loadgen.stub_server import StubServer

# As in Mooncake's published traces (FAST'25 repository, traces/*.jsonl): one object a line.
MOONCAKE = [
    {"timestamp": 27482, "input_length": 1100, "output_length": 52, "hash_ids": [0, 1, 2]},
    {"timestamp": 0, "input_length": 600, "output_length": 12, "hash_ids": [0, 3]},
    {"timestamp": 30535, "input_length": 900, "output_length": 7, "hash_ids": [0, 1, 4]},
]
# As in BurstGPT's released CSV files (BurstGPT_1.csv), its header and column order; the
# second row's 0 response tokens is a failed request in that trace.
BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,0,1087,Conversation log\n"
    "118,GPT-4,417,125,542,API log\n"
)


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_mooncake_lines_become_requests_in_arrival_order_in_seconds(tmp_path: Path) -> None:
    trace = load_trace(write_jsonl(tmp_path / "m.jsonl", MOONCAKE), "mooncake")
    assert trace.requests == (
        TraceRequest(0.0, 600, 12, (0, 3)),
        TraceRequest(27.482, 1100, 52, (0, 1, 2)),
        TraceRequest(30.535, 900, 7, (0, 1, 4)),
    )
    assert trace.block_tokens == 512


def test_burstgpt_rows_skip_failed_requests_and_start_at_zero(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text(BURSTGPT, encoding="utf-8")
    trace = load_trace(path, "burstgpt")
    assert trace.requests == (TraceRequest(0.0, 472, 18), TraceRequest(113.0, 417, 125))


def test_burstgpt_without_its_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text("time,in,out\n1,2,3\n", encoding="utf-8")
    with pytest.raises(TraceError, match="Request tokens"):
        load_trace(path, "burstgpt")


def test_our_jsonl_reads_seconds_lengths_and_optional_hashes(tmp_path: Path) -> None:
    rows: list[dict[str, object]] = [
        {"t": 1.5, "input_tokens": 20, "output_tokens": 4, "block_tokens": 8},
        {"t": 0.5, "input_tokens": 10, "output_tokens": 3, "hash_ids": [7]},
    ]
    trace = load_trace(write_jsonl(tmp_path / "s.jsonl", rows), "jsonl")
    assert trace.requests == (TraceRequest(0.0, 10, 3, (7,)), TraceRequest(1.0, 20, 4))
    assert trace.block_tokens == 8


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"t": 0, "input_tokens": 0, "output_tokens": 1}, "input_tokens"),
        ({"t": -1, "input_tokens": 1, "output_tokens": 1}, "arrival time"),
        ({"t": 0, "input_tokens": 1.5, "output_tokens": 1}, "input_tokens"),
        ({"t": 0, "input_tokens": 1, "output_tokens": 1, "hash_ids": ["a"]}, "hash_ids"),
    ],
)
def test_a_bad_line_is_refused_with_its_line_number(
    tmp_path: Path, row: dict[str, object], message: str
) -> None:
    good: dict[str, object] = {"t": 0, "input_tokens": 1, "output_tokens": 1}
    path = write_jsonl(tmp_path / "s.jsonl", [good, row])
    with pytest.raises(TraceError, match=f"s.jsonl:2: .*{message}"):
        load_trace(path, "jsonl")


def test_the_window_keeps_its_requests_and_the_speed_divides_their_offsets() -> None:
    trace = Trace(tuple(TraceRequest(float(t), 5, 5) for t in range(10)))
    replayed = trace.replayed(speed=2.0, start=3.0, duration=4.0)
    assert [r.offset for r in replayed.requests] == [0.0, 0.5, 1.0, 1.5]
    assert replayed.rate() == pytest.approx(2.0)
    with pytest.raises(TraceError, match="no requests"):
        trace.replayed(start=20.0)


def test_prompts_have_the_recorded_lengths_and_share_the_blocks_of_shared_hashes() -> None:
    trace = Trace(
        (
            TraceRequest(0.0, 20, 3, (1, 2, 3)),
            TraceRequest(1.0, 18, 4, (1, 2, 9)),
            TraceRequest(2.0, 12, 5, (5,)),
        ),
        block_tokens=8,
    )
    prompts = TracePrompts(trace, seed=3)
    words = [prompts.get(i).text.split(" ") for i in range(3)]
    assert [len(w) for w in words] == [20, 18, 12]
    assert [prompts.get(i).max_tokens for i in range(3)] == [3, 4, 5]
    assert words[0][:16] == words[1][:16]  # hash ids 1 and 2: two shared blocks
    assert words[0][16:] != words[1][16:18]
    assert words[2][:8] != words[0][:8]
    assert prompts.get(0) == TracePrompts(trace, seed=3).get(0)  # the same for every arm


async def test_a_replayed_level_sends_each_request_at_its_trace_time(stub: StubServer) -> None:
    offsets = [0.0, 0.02, 0.021, 0.1, 0.15, 0.3, 0.31, 0.32, 0.45, 0.5]
    trace = Trace(tuple(TraceRequest(t, 8, 3 + i) for i, t in enumerate(offsets)))
    cfg = LevelConfig(
        api=Api.COMPLETIONS,
        base_url=stub.base_url,
        model="stub",
        concurrency=16,
        num_requests=100,
        trace=trace,
    )
    result = await run_level(cfg, TracePrompts(trace))
    assert result.status == "completed" and result.mode == "rate"
    records = sorted(result.records, key=lambda r: r.start)
    assert len(records) == len(offsets)
    t0 = min(r.scheduled or 0.0 for r in records)
    assert [round((r.scheduled or 0.0) - t0, 6) for r in records] == offsets
    assert [r.output_tokens for r in records] == [3 + i for i in range(len(offsets))]
    late = sorted(r.start - (r.scheduled or 0.0) for r in records)
    assert late[0] >= 0.0
    # The 5 ms p99 target is the benchmark's (make bench-replay); here the bound is loose
    # enough for a shared test machine and still far below the trace's gaps of 10+ ms.
    assert quantile(late, 0.99) < 0.05


async def test_the_cli_replays_a_window_of_a_mooncake_file_at_speed(
    tmp_path: Path, stub: StubServer
) -> None:
    rows = [
        {"timestamp": ms, "input_length": 16, "output_length": 2, "hash_ids": [0]}
        for ms in range(0, 2000, 100)
    ]
    write_jsonl(tmp_path / "m.jsonl", rows)
    out, records = tmp_path / "out.json", tmp_path / "records.jsonl"
    args = build_parser().parse_args(
        ["--base-url", stub.base_url, "--concurrency", "8", "--trace", "m.jsonl",
         "--trace-dir", str(tmp_path), "--trace-format", "mooncake", "--trace-speed", "4",
         "--trace-start", "0.5", "--trace-duration", "1", "--requests-per-level", "100",
         "--output", str(out), "--records", str(records), "--quiet"]
    )  # fmt: skip
    assert await cli.run(args, EventWriter(None), None) == cli.EXIT_OK
    level = json.loads(out.read_text())["levels"][0]
    assert level["requests"]["ok"] == 10  # offsets 0.5 .. 1.4 s of the trace
    rows_out = [json.loads(line) for line in records.read_text().splitlines()]
    due = sorted(r["scheduled"] for r in rows_out)
    assert [round(t - due[0], 3) for t in due] == [round(0.025 * i, 3) for i in range(10)]
    assert {r["cat"] for r in rows_out} == {"trace"}


def test_settings_refuse_a_rate_beside_a_trace_and_a_path_from_a_sweep() -> None:
    with pytest.raises(LoadSettingsError, match="arrival times"):
        LoadSettings.clean({"requests_per_level": 5, "trace": "t.jsonl", "request_rate": 2})
    with pytest.raises(LoadSettingsError, match="trace folder"):
        LoadSettings.clean({"requests_per_level": 5, "trace": "../etc/passwd"})
    settings = LoadSettings.clean(
        {"requests_per_level": 5, "trace": "t.jsonl", "trace_format": "burstgpt"}
    )
    assert settings.to_argv() == [
        "--requests-per-level", "5", "--trace", "t.jsonl", "--trace-format", "burstgpt"
    ]  # fmt: skip
