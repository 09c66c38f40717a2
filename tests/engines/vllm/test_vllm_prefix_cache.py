"""The real vLLM (community CPU build, prefix caching on) under a shared-prefix workload: the
level's hit rate from the server's own counters (`vllm:prefix_cache_hits_total` over
`vllm:prefix_cache_queries_total`, between the load generator's boundary scrapes) lies within 5 %
of the rate the workload was built to produce; and under multi-turn sessions, each later turn,
whose history the cache holds, answers sooner than the session's first.

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
from benchlib.loadgen.cli_args import build_parser
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


@pytest.fixture(scope="module")
def vllm_prefix_caching(
    hf_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A vLLM server with prefix caching on, blocks of 32 tokens; yields its base URL. One start
    for the module's tests: each reads the counters over its own level only."""
    extra = ["--max-model-len", "2048", "--max-num-seqs", "8", "--enable-prefix-caching",
             "--block-size", "32"]  # fmt: skip
    log = tmp_path_factory.mktemp("vllm-prefix") / "vllm.log"
    with vllm_api_server(hf_models["tiny-llama-target"], free_port(), log, extra) as base_url:
        yield base_url


async def test_shared_prefix_hit_rate_from_the_counters_is_the_workloads(
    vllm_prefix_caching: str, tmp_path: Path
) -> None:
    base_url = vllm_prefix_caching
    events = tmp_path / "events.jsonl"
    args = build_parser().parse_args(
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


SESSIONS, TURNS, FIRST_WORDS, TURN_WORDS = 5, 4, 300, 4


async def test_later_turns_of_a_session_answer_sooner_than_its_first(
    vllm_prefix_caching: str, tmp_path: Path
) -> None:
    """Sessions of 4 turns, one after another, after 2 warm-up requests (a fresh server's first
    requests are slow): a 300-word first question (about 1,500 tokens), 4-word follow-ups. The
    first turn prefills the whole question; a later turn finds the history through the previous
    question in the cache and prefills only the stand-in answer, the new question and the
    template's few tokens, so its TTFT is lower. On 2 busy cores the prefill saved is ~10 ms
    against a floor of ~16 ms, so single requests are noisy: the medians decide (per turn over
    the sessions, and over the sessions of each one's later/first ratio)."""
    base_url = vllm_prefix_caching
    events = tmp_path / "events.jsonl"
    args = build_parser().parse_args(
        ["--base-url", base_url, "--model", "tiny", "--api", "chat", "--concurrency", "1",
         "--requests-per-level", str(SESSIONS * TURNS), "--input-tokens", str(FIRST_WORDS),
         "--max-tokens", "4", "--ignore-eos", "--warmup-requests", "2",
         "--session-turns", str(TURNS),
         "--turn-tokens", str(TURN_WORDS), "--boundary-metrics-url", base_url + "/metrics",
         "--quiet"]
    )  # fmt: skip
    with events.open("w") as stream:
        assert await cli.run(args, EventWriter(stream), None) == cli.EXIT_OK
    by_kind = {}
    for line in events.read_text().splitlines():
        event = json.loads(line)
        by_kind[event["event"]] = event
    summary = by_kind["level_summary"]["summary"]
    turns, sessions = summary["turns"], summary["sessions"]
    print("TTFT p50 per turn (ms):", [round(t["ttft_p50_ms"], 1) for t in turns])
    print("later / first TTFT per session:", sessions["later_over_first_ttft"])
    assert [(t["turn"], t["ok"]) for t in turns] == [(k, SESSIONS) for k in range(TURNS)]
    assert (sessions["sessions"], sessions["complete"]) == (SESSIONS, SESSIONS)
    # Every later turn's median TTFT below the first turn's, and the median session's later
    # turns' mean below its first's.
    assert all(t["ttft_p50_ms"] < turns[0]["ttft_p50_ms"] for t in turns[1:])
    assert sessions["later_over_first_ttft"]["count"] == SESSIONS
    assert sessions["later_over_first_ttft"]["p50"] < 1.0
    # The server says why: its counters over this level found most prompt tokens cached.
    before = parse_engine_metrics(
        by_kind["measure_start"]["server_metrics_text"], scraped_at=0.0, engine=Engine.VLLM
    )
    after = parse_engine_metrics(
        by_kind["level_summary"]["server_metrics_text"], scraped_at=1.0, engine=Engine.VLLM
    )
    interval = interval_between(before, after)
    print("prefix cache hit rate over the level:", interval.prefix_cache_hit_rate)
    assert interval.prefix_cache_hit_rate is not None and interval.prefix_cache_hit_rate > 0.5
