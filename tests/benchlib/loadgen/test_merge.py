from __future__ import annotations

import random
from dataclasses import replace

from benchlib.loadgen.apis import Api
from benchlib.loadgen.level import RunnerSample
from benchlib.loadgen.level_config import LevelConfig
from benchlib.loadgen.merge import merge_records
from benchlib.loadgen.metrics import summarize_level
from benchlib.loadgen.multiproc import run_level_multiprocess, split_level
from benchlib.loadgen.prompts import SyntheticPrompts
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from tests.benchlib.loadgen.conftest import (
    assert_close,
    clock_tolerance,
    make_record,
    shortest_interval,
    stall_bound_s,
)
from tests.benchlib.loadgen.stub_server import StubConfig, StubServer


def own_clock_offset(process: int) -> float:
    return 1000.0 * (process + 1) + 0.123456 * process


def regroup_on_own_clocks(
    records: list[RequestRecord], anchor: ClockAnchor
) -> list[tuple[ClockAnchor, list[RequestRecord]]]:
    """The records as each process held them: its own perf clock, offset from the others."""
    parts = []
    for proc in sorted({r.process for r in records}):
        offset = own_clock_offset(proc)
        own = ClockAnchor(anchor.t0_wall, anchor.t0_perf + offset)
        parts.append((own, [r.shifted(offset) for r in records if r.process == proc]))
    return parts


def shifted_times(records: list[RequestRecord]) -> list[float]:
    """Every time the round trip passes through: the records' own and their most shifted."""
    top = max(own_clock_offset(r.process) for r in records)
    ends = [r.end for r in records]
    return [*ends, *(t + top for t in ends)]


def test_merged_summary_equals_single_pass_summary_of_the_same_records():
    rng = random.Random(7)
    records = []
    for i in range(300):
        start = rng.uniform(0, 20)
        t = start + rng.uniform(0.01, 0.2)
        chunks = [(t, 1)]
        for _ in range(rng.randint(0, 30)):
            t += rng.uniform(0.001, 0.03)
            chunks.append((t, rng.randint(1, 4)))
        records.append(make_record(str(i), start, chunks, slot=i % 10, process=i % 2))
    anchor = ClockAnchor(t0_wall=1.7e9, t0_perf=5000.0)
    parts = regroup_on_own_clocks(records, anchor)
    _, merged = merge_records(parts, anchor=anchor)
    single = summarize_level(records, concurrency=10, anchor=anchor)
    abs_tol, rel_tol = clock_tolerance(
        shifted_times(records), shortest_interval_s=shortest_interval(records)
    )
    assert_close(
        summarize_level(merged, concurrency=10, anchor=anchor),
        single,
        abs_tol=abs_tol,
        rel_tol=rel_tol,
    )


def test_split_level_gives_disjoint_slots_that_add_up_to_c():
    cfg = LevelConfig(api=Api.COMPLETIONS, base_url="http://x", model="m", concurrency=7)
    shares = split_level(cfg, 3)
    assert [c.concurrency for c in shares] == [3, 2, 2]
    assert [c.slot_offset for c in shares] == [0, 3, 5]
    assert [c.process_index for c in shares] == [0, 1, 2]
    assert len(split_level(replace(cfg, concurrency=1), 4)) == 1


async def test_two_process_level_merges_exactly():
    async with StubServer(StubConfig(tokens_per_chunk=2, chunk_delay=0.004)) as server:
        cfg = LevelConfig(
            api=Api.COMPLETIONS,
            base_url=server.base_url,
            model="m",
            concurrency=6,
            num_requests=61,
            warmup_requests=4,
            max_tokens=12,
            sample_interval=0.2,
        )
        samples: list[RunnerSample] = []
        result = await run_level_multiprocess(cfg, SyntheticPrompts(8), 2, on_sample=samples.append)
        assert server.state.max_in_flight <= 6
    assert result.status == "completed", result.reason
    assert len(result.records) == 61
    assert len(result.warmup_records) == 4
    assert {r.process for r in result.records} == {0, 1}
    assert sorted({r.slot for r in result.records}) == list(range(6))
    assert len({r.request_id for r in result.records}) == 61
    # the processes started together: both were sending within a few ms of each other, plus
    # however late either one's event loop was woken (a loaded machine delays a sleeper; that is
    # measured as loop lag, not a fault of the aligned start)
    first = {p: min(r.start for r in result.records if r.process == p) for p in (0, 1)}
    woken_late_s = stall_bound_s(result.client)
    assert abs(first[0] - first[1]) < 0.05 + woken_late_s
    # exact merge: the summary of the merged level is the single-pass summary of the union, to the
    # resolution of the perf clock at the machine's uptime (not a fixed tolerance: see
    # clock_tolerance).
    single = summarize_level(result.records, concurrency=6, anchor=result.anchor)
    _, remerged = merge_records(
        regroup_on_own_clocks(result.records, result.anchor), anchor=result.anchor
    )
    abs_tol, rel_tol = clock_tolerance(
        shifted_times(result.records), shortest_interval_s=shortest_interval(result.records)
    )
    assert_close(
        summarize_level(remerged, concurrency=6, anchor=result.anchor),
        single,
        abs_tol=abs_tol,
        rel_tol=rel_tol,
    )
    assert single["requests"]["ok"] == 61
    assert single["steady"]["reached"]
    assert len(result.client["processes"]) == 2
    assert samples and max(s["processes"] for s in samples) == 2
