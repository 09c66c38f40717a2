"""The simulator's SGLang-style histograms use SGLang's default bounds, and a level whose TTFTs
fall below SGLang's first TTFT bound (0.1 s) gets a server-side TTFT labelled as coarse.

Default bounds as SGLang 0.5.23 sets them when started without `--bucket-time-to-first-token`
and friends (srt/metrics/collector.py; docs/engines.md, "SGLang": TTFT buckets start at 0.1 s).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from benchlib.simulator.metrics import EngineMetrics
from benchlib.simulator.profiles import PROFILES
from benchlib.simulator.scheduler import SchedulerCore
from hosts.telemetry.levels import level_server_metrics
from hosts.telemetry.prometheus import parse_engine_metrics, parse_samples


def _bounds(text: str, name: str) -> list[str]:
    return [
        dict(labels)["le"]
        for labels, _ in parse_samples(text)[f"{name}_bucket"].items()
        if dict(labels)["le"] != "+Inf"
    ]


def _level_with_ttft(ttft_s: float, requests: int = 20) -> Mapping[str, object]:
    core = SchedulerCore(PROFILES["baseline"])
    metrics = EngineMetrics("m", "sglang", 1)
    before = parse_engine_metrics(metrics.render(core).decode(), scraped_at=0.0)
    for i in range(requests):
        arrival = 100.0 + i
        chunks = [[arrival + ttft_s, 1], [arrival + ttft_s + 0.01, 1]]
        metrics.observe_request(arrival, chunks, arrival + 1.0, "length", generated=2)
    after = parse_engine_metrics(metrics.render(core).decode(), scraped_at=60.0)
    return level_server_metrics(before, after)


def test_sglang_style_histograms_use_sglangs_default_bounds() -> None:
    text = EngineMetrics("m", "sglang", 1).render(SchedulerCore(PROFILES["baseline"])).decode()
    ttft = _bounds(text, "sglang:time_to_first_token_seconds")
    assert ttft[:3] == ["0.1", "0.2", "0.4"] and ttft[-1] == "400.0" and len(ttft) == 18
    itl = _bounds(text, "sglang:inter_token_latency_seconds")
    assert itl[0] == "0.002" and itl[-1] == "8.0" and len(itl) == 23
    e2e = _bounds(text, "sglang:e2e_request_latency_seconds")
    assert e2e[0] == "0.1" and e2e[-1] == "2400.0" and len(e2e) == 22


def test_vllm_style_keeps_fine_ttft_bounds() -> None:
    text = EngineMetrics("m", "vllm", 1).render(SchedulerCore(PROFILES["baseline"])).decode()
    assert _bounds(text, "vllm:time_to_first_token_seconds")[0] == "0.001"


def test_a_30ms_ttft_level_reads_coarse_server_side_and_says_so() -> None:
    level = _level_with_ttft(0.030)
    ttft = level["ttft_s"]
    assert isinstance(ttft, dict)
    # Every sample sits in [0, 0.1]: the median interpolates to 50 ms, not the true 30 ms.
    assert ttft["p50"] == pytest.approx(0.05)
    assert ttft["mean"] == pytest.approx(0.030)  # sum / count is exact
    assert level["ttft_resolution_s"] == 0.1
    assert level["ttft_bucket_limited"] is True


def test_a_300ms_ttft_level_is_not_labelled_coarse() -> None:
    level = _level_with_ttft(0.300)
    ttft = level["ttft_s"]
    assert isinstance(ttft, dict)
    assert 0.2 < ttft["p50"] <= 0.4
    assert level["ttft_bucket_limited"] is False
