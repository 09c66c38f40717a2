"""The stage table of `make test` and its slowest tests, from the records its pytest stages leave
(tests/fixtures/stagereport.py). Standard library only: it runs before and without the venv.

    python3 scripts/stage_report.py REPORT_DIR TIMINGS_FILE [--slowest N]

TIMINGS_FILE holds one `stage<TAB>seconds<TAB>status` line per stage run (status: ok, FAILED,
STOPPED); REPORT_DIR one `<stage>.jsonl` per pytest stage. A stage stopped in the middle of a
test (the watchdog) is shown with the test it was running and for how long.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

COLUMNS = ("passed", "failed", "error", "skipped", "deselected")


@dataclass
class StageRecords:
    counts: Counter[str] = field(default_factory=Counter)
    durations: list[tuple[float, str]] = field(default_factory=list)
    unexpected_skips: list[str] = field(default_factory=list)
    # Every test started and not yet torn down: one per pytest-xdist worker when it runs several.
    running: list[tuple[str, float]] = field(default_factory=list)


def read_stage(path: Path) -> StageRecords:
    records = StageRecords()
    started: dict[str, float] = {}
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by the watchdog
        event = record.get("event")
        if event == "start":
            started[record["nodeid"]] = record["t"]
        elif event == "result":
            if record["when"] == "teardown":
                started.pop(record["nodeid"], None)
            records.durations.append(
                (record["duration"], f"{record['when']:<8} {record['nodeid']}")
            )
            if record["outcome"] != "ok":
                records.counts[record["outcome"]] += 1
        elif event == "summary":
            # Counted here, not from the results: a stage the watchdog stopped has no summary.
            # pytest-clock runs pytest twice into one file: the counts add up.
            records.counts["deselected"] += record["counts"].get("deselected", 0)
            records.unexpected_skips += record["unexpected_skips"]
    records.running = sorted(started.items(), key=lambda item: item[1])
    return records


def render(report_dir: Path, timings: Path, slowest: int) -> str:
    lines = ["", "stage table (wall seconds; test counts of the pytest stages):"]
    header = f"  {'stage':<16} {'seconds':>8}  " + " ".join(f"{c:>10}" for c in COLUMNS)
    lines.append(header)
    everything: list[tuple[float, str]] = []
    notes: list[str] = []
    rows = timings.read_text(encoding="utf-8").splitlines() if timings.exists() else []
    for row in rows:
        stage, seconds, status = row.split("\t")
        records = read_stage(report_dir / f"{stage}.jsonl")
        counts = " ".join(
            f"{records.counts[c]:>10}" if (report_dir / f"{stage}.jsonl").exists() else f"{'':>10}"
            for c in COLUMNS
        )
        flag = "" if status == "ok" else f"  {status}"
        lines.append(f"  {stage:<16} {float(seconds):>8.1f}  {counts}{flag}")
        everything += [(d, f"{stage:<14} {what}") for d, what in records.durations]
        for nodeid in records.unexpected_skips:
            notes.append(f"  unexpected skip in {stage}: {nodeid}")
        for nodeid, since in records.running if status == "STOPPED" else []:
            notes.append(
                f"  {stage} was stopped in {nodeid}, running for {time.time() - since:.0f} s"
            )
    lines += notes
    if everything:
        everything.sort(reverse=True)
        lines.append(f"\nthe {min(slowest, len(everything))} slowest test phases of the run:")
        lines += [f"  {d:>8.2f}s {what}" for d, what in everything[:slowest]]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    slowest = 30
    if "--slowest" in argv:
        at = argv.index("--slowest")
        slowest = int(argv[at + 1])
        del argv[at : at + 2]
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(render(Path(argv[0]), Path(argv[1]), slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
