from __future__ import annotations

# Streaming load generator for LLM inference servers (plain asyncio + httpx, no Django).
#
# Library use:
#
#     cfg = LevelConfig(api=Api.COMPLETIONS, base_url=..., model=..., concurrency=10,
#                       num_requests=200)
#     result = await run_level(cfg, SyntheticPrompts(256))
#     summary = summarize_level(result.records, concurrency=10, partial=result.partial,
#                               anchor=result.anchor)
from benchlib.loadgen.apis import Api, build_body
from benchlib.loadgen.client import make_client, send_request
from benchlib.loadgen.level import LevelRunner, run_level
from benchlib.loadgen.level_config import LevelConfig, LevelResult
from benchlib.loadgen.merge import merge_records, merge_results
from benchlib.loadgen.metrics import distribution, summarize_level
from benchlib.loadgen.multiproc import run_level_multiprocess, split_level
from benchlib.loadgen.prompts import (
    DatasetPrompts,
    Prompt,
    SyntheticPrompts,
    load_dataset,
    load_jsonl,
    load_sharegpt,
)
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.sse import SSEDecoder
from benchlib.loadgen.steady import steady_window
from benchlib.stats.intervals import quantile

__all__ = [
    "Api",
    "ClockAnchor",
    "DatasetPrompts",
    "LevelConfig",
    "LevelResult",
    "LevelRunner",
    "Prompt",
    "RequestRecord",
    "SSEDecoder",
    "SyntheticPrompts",
    "build_body",
    "distribution",
    "load_dataset",
    "load_jsonl",
    "load_sharegpt",
    "make_client",
    "merge_records",
    "merge_results",
    "quantile",
    "run_level",
    "run_level_multiprocess",
    "send_request",
    "split_level",
    "steady_window",
    "summarize_level",
]
