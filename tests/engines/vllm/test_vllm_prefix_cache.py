"""The real vLLM (community CPU build, prefix caching on) under a shared-prefix workload: the
level's hit rate from the server's own counters (`vllm:prefix_cache_hits_total` over
`vllm:prefix_cache_queries_total`, between the load generator's boundary scrapes) lies within 5 %
of the rate the workload was built to produce.

One server start (1-5 minutes on 2 busy cores). The tiny model's tokenizer has one token per
character: prompts of common words are about five tokens a word, prefix and own words alike, so
the share of cached tokens is the share of cached words to well under 1 %; vLLM caches whole
blocks of 32 tokens (the CPU build takes multiples of 32 only), which costs a hit at most 31 of its ~1,000 tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchlib.loadgen import cli
from benchlib.loadgen.events import EventWriter
from benchlib.loadgen.prefixes import SharedPrefixPrompts
from benchlib.loadgen.prompts import SyntheticPrompts
from hosts.telemetry.deltas import interval_between
from hosts.telemetry.engine_profiles import Engine
from hosts.telemetry.prometheus import parse_engine_metrics
from tests.engines.vllm.conftest import ROOT, VLLM_PY
from tests.fixtures.ports import free_port

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

READY_TIMEOUT_S = 420
REQUESTS = 64
PREFIXES, PREFIX_WORDS, SHARE, OWN_WORDS = 4, 200, 0.75, 40


def wait_ready(base_url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            if httpx.get(base_url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert process.poll() is None, f"vLLM exited: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"vLLM not ready: {log.read_text()[-3000:]}"
        time.sleep(1.0)


@pytest.fixture
def vllm_prefix_caching(hf_models: dict[str, Path], tmp_path: Path) -> Iterator[str]:
    """A vLLM server with prefix caching on, blocks of 32 tokens; yields its base URL."""
    port = free_port()
    argv = [
        str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(hf_models["tiny-llama-target"]), "--served-model-name", "tiny",
        "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048",
        "--max-num-seqs", "8", "--enable-prefix-caching", "--block-size", "32",
    ]  # fmt: skip
    log = tmp_path / "vllm.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        began = time.monotonic()
        wait_ready(base_url, process, log)
        print(f"vLLM ready in {time.monotonic() - began:.0f} s")
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def test_shared_prefix_hit_rate_from_the_counters_is_the_workloads(
    vllm_prefix_caching: str, tmp_path: Path
) -> None:
    base_url = vllm_prefix_caching
    events = tmp_path / "events.jsonl"
    args = cli.build_parser().parse_args(
        ["--base-url", base_url, "--model", "tiny", "--concurrency", "1",
         "--requests-per-level", str(REQUESTS), "--input-tokens", str(OWN_WORDS),
         "--max-tokens", "4", "--ignore-eos", "--prefix-count", str(PREFIXES),
         "--prefix-tokens", str(PREFIX_WORDS), "--prefix-share", str(SHARE),
         "--boundary-metrics-url", base_url + "/metrics", "--quiet"]
    )  # fmt: skip
    with events.open("w") as stream:
        assert await cli.run(args, EventWriter(stream), None) == cli.EXIT_OK
    by_kind = {}
    for line in events.read_text().splitlines():
        event = json.loads(line)
        by_kind[event["event"]] = event
    opened, closed = by_kind["measure_start"], by_kind["level_summary"]
    assert closed["summary"]["requests"]["ok"] == REQUESTS
    before = parse_engine_metrics(opened["server_metrics_text"], scraped_at=0.0, engine=Engine.VLLM)
    after = parse_engine_metrics(closed["server_metrics_text"], scraped_at=1.0, engine=Engine.VLLM)
    interval = interval_between(before, after)
    # One request after another (C=1): every later use of a prefix finds it cached.
    built = SharedPrefixPrompts(
        SyntheticPrompts(OWN_WORDS), PREFIXES, PREFIX_WORDS, SHARE
    ).expected_hit_rate(range(REQUESTS))
    print(f"hit rate: counters {interval.prefix_cache_hit_rate}, built {built:.4f}")
    assert interval.prefix_cache_hit_rate_source == "counters"
    assert interval.prefix_cache_hit_rate is not None
    assert abs(interval.prefix_cache_hit_rate - built) <= 0.05 * built
