"""Experiments on the real simulator with the real load generator and the real comparison:
prompt categories whose acceptance differs by design, and SLOs that turn the verdict.

Each arm is a real simulator process (its own engine model); the load generator runs the
levels with a built-in prompt set and writes its records file, the level summaries go into
``comparison_build`` exactly as a finished experiment's sweeps do (benchmarks.experiments.
selectors builds the same LevelRun from SweepLevel rows).

Design (the simulator's model, benchlib/simulator/model.py): a decode step for b running
requests lasts t(b) = t0 + k*b ms; a speculative step emits 1 + accepted drafts, with the accept
length set per prompt category. With baseline t = 10 + 0.5b and EAGLE t = 12 + 2.9b, the
model's EAGLE/baseline ratio is L * (10 + 0.5b) / (12 + 2.9b): for code (L = 1.8) 1.27 at C=1,
1.11 at C=2 and 0.72 at C=8 (crossover between 2 and 8); for chat (L = 3.0) 1.19 at C=8 and
0.74 at C=32 (crossover between 8 and 32). Steps are long enough (>= 10 ms) that the client,
sharing this machine, is not what limits the baseline's many small chunks at C=32.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.template.loader import render_to_string
from django.utils.html import escape

from benchlib.loadgen.apis import Api
from benchlib.loadgen.datasets import builtin_prompts
from benchlib.loadgen.events import dumps
from benchlib.loadgen.goodput import Slo
from benchlib.loadgen.level import run_level
from benchlib.loadgen.level_config import LevelConfig
from benchlib.loadgen.level_summary import level_summary
from benchmarks.experiments.comparison import Comparison, comparison_build
from benchmarks.experiments.level_rows import LevelRow
from benchmarks.experiments.level_runs import LevelRun, SeriesData
from benchmarks.experiments.verdicts import CrossingEntry
from tests.fixtures.ports import free_port
from tests.fixtures.statements import html_statements, normalized

ROOT = Path(__file__).resolve().parents[3]
CHAT_L, CODE_L = 3.0, 1.8
BASELINE = ["--profile", "baseline", "--t0-ms", "10", "--k-ms", "0.5"]
EAGLE = ["--profile", "eagle3", "--t0-ms", "12", "--k-ms", "2.9", "--spec-steps", "3",
         "--category-accept-length", f"chat={CHAT_L},code={CODE_L}"]  # fmt: skip


@contextmanager
def simulator(tmp: Path, args: Sequence[str]) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "0", "--seed", "5", "--state-dir", str(tmp / f"state-{port}"), *args],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "simulator exited"
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "simulator not healthy"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(20)


async def run_arm(
    tmp: Path,
    *,
    label: str,
    args: Sequence[str],
    levels: Sequence[int],
    prompt_set: str,
    speculative: bool,
    slo: Slo | None = None,
    max_tokens: int = 64,
    requests: int = 6,
) -> SeriesData:
    """One arm's sweep: every level against a fresh simulator, records and summaries kept."""
    records = tmp / f"{label}-{prompt_set}.jsonl"
    truth = truth_log(tmp, label, prompt_set)
    runs = []
    with (
        simulator(tmp, [*args, "--truth-log", str(truth)]) as url,
        records.open("w", encoding="utf-8") as out,
    ):
        for i, c in enumerate(levels):
            cfg = LevelConfig(
                api=Api.GENERATE, base_url=url, model="", concurrency=c, level_index=i,
                num_requests=max(requests, 2 * c), max_tokens=max_tokens, ignore_eos=True,
                warmup_requests=min(c, 4 if max_tokens < 512 else 1), run_id=label,
            )  # fmt: skip
            result = await run_level(cfg, builtin_prompts(prompt_set, seed=11))
            assert result.status == "completed", result.reason
            for rec in result.records:
                out.write(dumps(rec.to_json(result.anchor, level_index=i)) + "\n")
            summary = level_summary(result, processes=1, slo=slo)
            figures = {
                "output_tok_s": summary["output_tok_s"],
                "steady_output_tok_s": summary["steady"]["output_tok_s"],
                "ttft_p50_ms": summary["ttft_ms"]["p50"],
                "itl_p50_ms": summary["itl_ms"]["p50"],
            }
            runs.append(LevelRun(sweep_id=hash(label) % 1000, index=i, concurrency=c,
                                 figures=figures, records_path=str(records),
                                 summary=summary))  # fmt: skip
    return SeriesData(label=label, name=f"sim-{label}", speculative=speculative,
                      profile_id=None, sweep_ids=(1,), runs=tuple(runs))  # fmt: skip


def truth_log(tmp: Path, label: str, prompt_set: str) -> Path:
    """Where the arm's simulator writes what it did to each request (docs/simulator.md)."""
    return tmp / f"truth-{label}-{prompt_set}.jsonl"


def served_ttft_s(tmp: Path, label: str, prompt_set: str) -> list[float]:
    """Each measured request's time to first token as the simulator served it (arrival to
    first token, its own clock): what no client-side delay of a busy machine is part of."""
    rows = [json.loads(line) for line in truth_log(tmp, label, prompt_set).read_text().splitlines()]
    return [r["first_token"] - r["arrival"] for r in rows if "-w" not in r["request_id"]]


def _row(comparison: Comparison, label: str, c: int) -> LevelRow:
    series = next(s for s in comparison["series"] if s["label"] == label)
    return next(r for r in series["levels"] if r["concurrency"] == c)


async def test_per_category_accept_length_matches_the_configured_values(tmp_path: Path) -> None:
    eagle = await run_arm(tmp_path, label="B", args=EAGLE, levels=[4, 16], prompt_set="mixed",
                          speculative=True, max_tokens=128)  # fmt: skip
    base = await run_arm(tmp_path, label="A", args=BASELINE, levels=[4, 16], prompt_set="mixed",
                         speculative=False, max_tokens=128)  # fmt: skip
    comparison = comparison_build(series=[base, eagle])
    for c in (4, 16):
        cats = _row(comparison, "B", c)["by_category"]
        assert set(cats) == {"chat", "code"}
        # The last step of a request may be cut by max_tokens: a bias of under 1% at 128 tokens.
        assert cats["chat"]["accept_length"] == pytest.approx(CHAT_L, rel=0.05)
        assert cats["code"]["accept_length"] == pytest.approx(CODE_L, rel=0.05)
        assert _row(comparison, "A", c)["accept_length"] is None  # no speculation, no figure
    html = render_to_string("benchmarks/comparison_body.html", {"comparison": comparison})
    assert 'data-category="chat"' in html and 'data-category="code"' in html


async def test_the_crossover_moves_with_the_prompt_category(tmp_path: Path) -> None:
    levels = [1, 2, 8, 32]
    crossover: dict[str, CrossingEntry | None] = {}
    ratios: dict[str, list[float]] = {}
    for prompt_set, length in (("humaneval", CODE_L), ("sharegpt", CHAT_L)):
        base = await run_arm(tmp_path, label="A", args=BASELINE, levels=levels,
                             prompt_set=prompt_set, speculative=False)  # fmt: skip
        eagle = await run_arm(tmp_path, label="B", args=EAGLE, levels=levels,
                              prompt_set=prompt_set, speculative=True)  # fmt: skip
        comparison = comparison_build(series=[base, eagle])
        (verdict,) = comparison["verdicts"]
        crossover[prompt_set] = verdict["crossover"]["last"]
        ratios[prompt_set] = [r["point"] for r in verdict["ratios"]]
        only = {"humaneval": "code", "sharegpt": "chat"}[prompt_set]
        for c in levels:
            cats = _row(comparison, "B", c)["by_category"]
            assert set(cats) == {only}
            assert cats[only]["accept_length"] == pytest.approx(length, rel=0.08)
    code, chat = crossover["humaneval"], crossover["sharegpt"]
    assert code is not None and chat is not None, (crossover, ratios)
    assert code["direction"] == chat["direction"] == "falls-behind"
    # code: between C=2 and C=8 by design; chat: between C=8 and C=32
    assert code["upper_level"] <= 8 < chat["upper_level"], crossover
    assert code["concurrency"] < chat["concurrency"]


async def test_with_slos_the_goodput_verdict_differs_from_raw_throughput(tmp_path: Path) -> None:
    # B decodes ~3.5 tokens a step but every request waits 1.2 s before it is scheduled: for
    # 512-token outputs it still delivers more tokens per second (A: 512 steps of ~4.7 ms, ~2.4 s
    # a request; B: ~146 steps, ~0.7 s, + 1.2 s), yet no request of B meets a 600 ms TTFT target.
    # The target leaves room for this shared machine's own send-path delays in A's TTFT (up to
    # ~250 ms seen at C=8 under load).
    slo = Slo(ttft_ms=600.0, scope="request", attainment=0.9)
    a_args = ["--profile", "baseline", "--t0-ms", "4.7", "--k-ms", "0.1"]
    fast_but_late = ["--profile", "eagle3", "--t0-ms", "4.7", "--k-ms", "0.1", "--spec-steps", "4",
                     "--accept-length", "3.5", "--request-overhead-ms", "1200"]  # fmt: skip
    levels = [1, 8]
    base = await run_arm(tmp_path, label="A", args=a_args, levels=levels, prompt_set="humaneval",
                         speculative=False, slo=slo, max_tokens=512, requests=4)  # fmt: skip
    late = await run_arm(tmp_path, label="B", args=fast_but_late, levels=levels,
                         prompt_set="humaneval", speculative=True, slo=slo, max_tokens=512,
                         requests=4)  # fmt: skip
    comparison: Any = comparison_build(series=[base, late], slo=slo.to_dict())
    # The premise, as the simulators served it: every request of B waited its 1.2 s, every
    # request of A had its first token well inside the target (what the client adds on a busy
    # machine comes on top, in the room the target leaves).
    served = {label: served_ttft_s(tmp_path, label, "humaneval") for label in ("A", "B")}
    assert len(served["A"]) == len(served["B"]) == 4 + 16  # requests=4 at C=1, 2 x 8 at C=8
    assert min(served["B"]) >= 1.2, served["B"]
    assert max(served["A"]) < 0.3, served["A"]  # half the 600 ms target
    (raw,) = comparison["verdicts"]
    assert all(r["point"] > 1.0 for r in raw["ratios"]), raw["ratios"]  # B wins raw tok/s
    assert "ahead" in [lv["status"] for lv in raw["decision"]["levels"]], raw["text"]
    (good,) = comparison["goodput_verdicts"]
    series = {s["label"]: s for s in comparison["series"]}
    shares = {s["label"]: [(r["concurrency"], r["goodput_share"]) for r in s["levels"]]
              for s in comparison["series"]}  # fmt: skip
    assert series["A"]["slo_max_concurrency"] == 8, shares
    assert series["B"]["slo_max_concurrency"] is None
    assert all(_row(comparison, "B", c)["goodput_tok_s"] == 0.0 for c in levels)
    assert "A (sim-A) meets them up to C=8" not in good["text"]  # names first, then labels
    assert "sim-A (A) meets them up to C=8" in good["text"]
    assert "sim-B (B) meets them at no tested level" in good["text"]
    html = render_to_string("benchmarks/comparison_body.html", {"comparison": comparison})
    # The page says both: the decision's statements, and the goodput verdict.
    assert html_statements(html) == normalized(raw["decision"]["statements"])
    assert escape(good["text"]) in html
