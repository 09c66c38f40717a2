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
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchlib.loadgen import cli
from benchlib.loadgen.events import EventWriter
from benchlib.loadgen.prefixes import SharedPrefixPrompts
from benchlib.loadgen.prompts import SyntheticPrompts
from hosts.telemetry.deltas import interval_between
from hosts.telemetry.engine_profiles import Engine
from hosts.telemetry.prometheus import parse_engine_metrics
from tests.engines.vllm.conftest import vllm_api_server
from tests.fixtures.ports import free_port

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

REQUESTS = 64
PREFIXES, PREFIX_WORDS, SHARE, OWN_WORDS = 4, 200, 0.75, 40


@pytest.fixture
def vllm_prefix_caching(hf_models: dict[str, Path], tmp_path: Path) -> Iterator[str]:
    """A vLLM server with prefix caching on, blocks of 32 tokens; yields its base URL."""
    extra = ["--max-model-len", "2048", "--max-num-seqs", "8", "--enable-prefix-caching",
             "--block-size", "32"]  # fmt: skip
    with vllm_api_server(
        hf_models["tiny-llama-target"], free_port(), tmp_path / "vllm.log", extra
    ) as base_url:
        yield base_url


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
