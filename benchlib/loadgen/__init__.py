"""Streaming load generator for LLM inference servers (plain asyncio + httpx, no Django).

Library use, each name from its module:

    from benchlib.loadgen.apis import Api
    from benchlib.loadgen.level import run_level
    from benchlib.loadgen.level_config import LevelConfig
    from benchlib.loadgen.metrics import summarize_level
    from benchlib.loadgen.prompts import SyntheticPrompts

    cfg = LevelConfig(api=Api.COMPLETIONS, base_url=..., model=..., concurrency=10,
                      num_requests=200)
    result = await run_level(cfg, SyntheticPrompts(256))
    summary = summarize_level(result.records, concurrency=10, partial=result.partial,
                              anchor=result.anchor)

This package re-exports nothing."""
