from __future__ import annotations

from perf.bench_records import kill_mid_level, simulator


def test_a_sigkill_mid_level_leaves_every_completed_record_whole_on_disk(tmp_path):
    # The load generator runs as its own process against the real simulator and is killed with
    # SIGKILL once 150 records are on disk. kill_mid_level reads the file back and raises unless
    # every record parses, has every field, and equals a finished request of the truth log
    # (its tokens chunk by chunk).
    with simulator(tmp_path, max_running=64) as (url, truth):
        figures = kill_mid_level(url, truth, tmp_path, at_rows=150)
    assert figures["records_on_disk"] >= 150
    # What the kill lost is the batch not yet flushed: finished requests the file lacks, never
    # records the truth log lacks (checked inside), and never more than the level had done.
    assert 0 <= figures["lost"] < figures["finished_by_truth_log"]
