"""A sweep level split across load-generator processes: the exact merge of their records, the
per-shard split with laggards flagged, and a real split sweep against the simulator."""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from benchlib.loadgen.metrics import summarize_level
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.recordstore import iter_rows
from benchmarks.sweeps import handler, services, split
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepSample, SweepState
from benchmarks.sweeps.split import ShardLevel, combine_samples, merge_shard_levels
from core.jobs import JobContext
from tests.benchlib.loadgen.conftest import (
    assert_close,
    clock_tolerance,
    make_record,
    shortest_interval,
)
from tests.benchmarks.conftest import Simulator, load, start_simulator

ANCHOR = ClockAnchor(t0_wall=1.7e9, t0_perf=5000.0)
ADDED_KEYS = {"level_index", "status", "reason", "processes", "client", "anchor", "split"}


def _records(n: int, *, process: int, slots: int, rate: float = 1.0, delay: float = 0.0,
             seed: int = 7) -> list[RequestRecord]:  # fmt: skip
    """Back-to-back requests on `slots` slots, ~`rate` x the base token speed."""
    rng = random.Random(seed + process)
    free_at = [5000.0 + delay + rng.uniform(0, 0.002) for _ in range(slots)]
    out = []
    for i in range(n):
        slot = i % slots
        start = free_at[slot] + 0.0005
        t = start + 0.02
        chunks = [(t, 1)]
        for _ in range(20):
            t += rng.uniform(0.004, 0.006) / rate
            chunks.append((t, rng.randint(1, 3)))
        free_at[slot] = t
        out.append(make_record(f"p{process}-{i}", start, chunks, slot=slot + 10 * process,
                               process=process))  # fmt: skip
    return out


def _on_own_clock(index: int, records: list[RequestRecord], offset: float, concurrency: int,
                  **kw: Any) -> ShardLevel:  # fmt: skip
    own = ClockAnchor(ANCHOR.t0_wall, ANCHOR.t0_perf + offset)
    return ShardLevel(index=index, concurrency=concurrency, anchor=own,
                      records=[r.shifted(offset) for r in records], start_at=ANCHOR.t0_wall, **kw)  # fmt: skip


def test_merged_summary_of_two_shards_equals_the_single_process_summary_of_the_same_records():
    first = _records(120, process=0, slots=6)
    second = _records(80, process=1, slots=4)
    single = summarize_level([*first, *second], concurrency=10, anchor=ANCHOR)
    # Each shard holds its records on its own perf clock, as separate processes do.
    merged = merge_shard_levels(
        [_on_own_clock(0, first, 0.0, 6), _on_own_clock(1, second, 1234.567891, 4)],
        level_index=3,
    )
    abs_tol, rel_tol = clock_tolerance(
        [r.end + 1234.567891 for r in second],
        shortest_interval_s=shortest_interval([*first, *second]),
    )
    assert_close({k: v for k, v in merged.items() if k not in ADDED_KEYS}, single,
                 abs_tol=abs_tol, rel_tol=rel_tol)  # fmt: skip
    assert merged["requests"]["ok"] == 200 and merged["concurrency"] == 10
    assert merged["level_index"] == 3 and merged["processes"] == 2
    shards = merged["split"]["shards"]
    assert [(s["index"], s["concurrency"], s["requests_ok"]) for s in shards] == [
        (0, 6, 120),
        (1, 4, 80),
    ]
    assert merged["split"]["behind"] == []


def test_a_shard_that_starts_late_and_streams_slower_is_flagged_and_the_others_are_not():
    on_time = _records(60, process=0, slots=4)
    late_and_slow = _records(60, process=1, slots=4, rate=0.5, delay=1.0)
    merged = merge_shard_levels(
        [_on_own_clock(0, on_time, 0.0, 4), _on_own_clock(1, late_and_slow, 77.0, 4)],
        level_index=0,
    )
    rows = {row["index"]: row for row in merged["split"]["shards"]}
    assert merged["split"]["behind"] == [1]
    assert rows[0]["behind"] == []
    why = " ".join(rows[1]["behind"])
    assert "late" in why and "per stream" in why, why
    assert rows[1]["start_lag_s"] == pytest.approx(1.0, abs=0.02)
    assert any("shard 1 fell behind" in w for w in merged["client"]["warnings"])


def test_a_client_limited_or_failed_shard_is_flagged():
    a, b = _records(40, process=0, slots=4), _records(40, process=1, slots=4)
    merged = merge_shard_levels(
        [
            _on_own_clock(0, a, 0.0, 4, client={"client_limited": True}),
            _on_own_clock(1, b, 3.0, 4, status="failed", reason="server errors"),
        ],
        level_index=0,
    )
    rows = merged["split"]["shards"]
    assert "client-limited" in rows[0]["behind"] and "ended failed" in rows[1]["behind"]
    assert merged["status"] == "failed" and merged["partial"] is True
    assert merged["client"]["client_limited"] is True


def test_live_samples_of_the_shards_add_up_and_keep_the_worst_latency():
    samples = [
        {"event": "sample", "t": 10.0, "tok_s": 100.0, "in_flight": 2, "completed": 5,
         "errors": 0, "ttft_p50": 0.02, "loop_lag_ms": 1.0, "client_cpu": 20.0,
         "client_limited": False, "phase": "measure"},
        {"event": "sample", "t": 10.2, "tok_s": 80.0, "in_flight": 3, "completed": 4,
         "errors": 1, "ttft_p50": 0.05, "loop_lag_ms": 9.0, "client_cpu": 70.0,
         "client_limited": True, "phase": "measure"},
    ]  # fmt: skip
    out = combine_samples(samples, concurrency=5)
    assert (out["tok_s"], out["in_flight"], out["completed"], out["errors"]) == (180.0, 5, 9, 1)
    assert (out["ttft_p50"], out["loop_lag_ms"], out["t"]) == (0.05, 9.0, 10.2)
    assert out["client_limited"] is True and out["concurrency"] == 5 and out["shards"] == 2


def test_shard_count_splits_only_above_the_streams_per_process():
    assert split.shard_count(4, streams=0) == 1
    assert split.shard_count(4, streams=4) == 1
    assert split.shard_count(5, streams=4) == 2
    assert split.shard_count(1000, streams=256) == 4
    # Never more shards than requests: each shard needs at least one.
    assert split.shard_count(1000, streams=10, requests=3) == 3


@pytest.fixture
def fast_simulator(tmp_path: Path) -> Iterator[Simulator]:
    sim = start_simulator(tmp_path, "--profile", "fast")
    try:
        yield sim
    finally:
        sim.kill()


@pytest.mark.django_db(transaction=True)
async def test_a_sweep_level_above_the_streams_per_process_runs_as_two_processes_merged_into_one_level(
    fast_simulator: Simulator, settings: Any, tmp_path: Path, local_host: Any
) -> None:
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    settings.SPECDASH_LOADGEN_MAX_STREAMS = 2
    sweep = await sync_to_async(services.sweep_create)(
        base_url=fast_simulator.base_url,
        levels=[1, 4],
        load=load(model=fast_simulator.model, requests_per_level=None, duration=2.5, max_tokens=8),
    )
    assert sweep.job_id is not None
    ctx = JobContext(job_id=sweep.job_id, kind="sweep.run", params={"sweep_id": sweep.pk},
                     worker_id="test")  # fmt: skip
    result = await handler.run_sweep(ctx)
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert (sweep.state, sweep.reason) == (SweepState.COMPLETED, ""), sweep.reason
    assert result["split"] is True and result["levels_finished"] == 2
    levels = [lv async for lv in SweepLevel.objects.filter(sweep_id=sweep.pk).order_by("index")]
    assert [(lv.concurrency, lv.state) for lv in levels] == [
        (1, LevelState.COMPLETED),
        (4, LevelState.COMPLETED),
    ]
    split = levels[1].summary["split"]["shards"]
    # Two processes of two streams each: one level, one summary over both shards' requests.
    assert [s["concurrency"] for s in split] == [2, 2]
    assert all(s["requests_ok"] > 0 for s in split)
    assert levels[1].requests_ok == sum(s["requests_ok"] for s in split)
    assert levels[1].summary["processes"] == 2 and levels[0].summary["processes"] == 1
    assert all(s["start_lag_s"] is not None for s in split)
    lines = await sync_to_async(lambda: list(iter_rows(Path(sweep.records_path))))()
    level1 = [d for d in lines if d["level"] == 1]
    assert len(lines) == levels[0].requests_ok + levels[1].requests_ok
    assert len(level1) == levels[1].requests_ok
    assert {d["id"].rsplit("-", 2)[0].rsplit("-p", 1)[1] for d in level1} == {"0", "1"}
    merged_again = summarize_level(
        [RequestRecord.from_json(d, ANCHOR) for d in level1], concurrency=4, anchor=ANCHOR
    )
    assert merged_again["requests"] == levels[1].summary["requests"]
    assert merged_again["output_tokens"] == levels[1].summary["output_tokens"]
    # Live samples of the split level are the shards' combined ones.
    samples = [s async for s in SweepSample.objects.filter(sweep_id=sweep.pk, level_index=1)]
    assert samples and all(s.data["shards"] == 2 and s.data["concurrency"] == 4 for s in samples)


def test_each_shard_gets_its_share_of_the_requests_a_common_start_and_its_own_run_id(
    tmp_path: Path,
) -> None:
    shards = [
        split.Shard(i, 2, share, tmp_path / f"s{i}.jsonl") for i, share in enumerate((11, 10))
    ]
    argvs = [
        split.shard_argv(base_url="http://127.0.0.1:1", model="m", start_at=1.7e9 + 0.5,
                               load={"api": "completions", "requests_per_level": 21}, shard=s,
                               run_id="s1-l0")
        for s in shards
    ]  # fmt: skip
    for argv, shard in zip(argvs, shards, strict=True):

        def flag(name: str, argv: list[str] = argv) -> str:
            return argv[argv.index(name) + 1]

        assert flag("--requests-per-level") == str(shard.requests)
        assert flag("--concurrency") == "2" and flag("--start-at") == "1700000000.5"
        assert flag("--run-id") == f"s1-l0-p{shard.index}"
        assert flag("--records") == str(shard.records_path)
        assert flag("--seed") == str(shard.index)


@pytest.mark.django_db(transaction=True)
async def test_a_full_disk_while_a_split_level_merges_gives_the_clear_reason_and_whole_lines(
    fast_simulator: Simulator,
    settings: Any,
    tmp_path: Path,
    local_host: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The merge of a split level into the sweep's records file hits a full disk mid-record:
    # the sweep says so as the one-process path does (no error text, no "could not start"),
    # and the file keeps whole lines only, so a resume appends after them.
    from benchmarks.sweeps import distributed

    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    settings.SPECDASH_LOADGEN_MAX_STREAMS = 2
    # The torn last line of the JSON-lines form is what is cut (a compact file's torn block
    # has its own test).
    settings.SPECDASH_RECORDS_FORMAT = "jsonl"

    def full_disk(shard: Any, *, level_index: int, sweep_records: Path, attempt: int) -> Any:
        with open(sweep_records, "a") as f:
            f.write('{"level": 0, "id": "whole"}\n{"level": 0, "id": "torn", "tt')
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(distributed, "read_shard_records", full_disk)
    sweep = await sync_to_async(services.sweep_create)(
        base_url=fast_simulator.base_url,
        levels=[4],
        load=load(model=fast_simulator.model, requests_per_level=8, max_tokens=8),
    )
    assert sweep.job_id is not None
    ctx = JobContext(job_id=sweep.job_id, kind="sweep.run", params={"sweep_id": sweep.pk},
                     worker_id="test")  # fmt: skip
    await handler.run_sweep(ctx)
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.state == SweepState.FAILED
    assert sweep.reason.startswith("the disk holding the records is full"), sweep.reason
    assert "resume" in sweep.reason and "could not start" not in sweep.reason
    text = await sync_to_async(Path(sweep.records_path).read_text)()
    assert text == '{"level": 0, "id": "whole"}\n'
