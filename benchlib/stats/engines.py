"""The engine options that bear on "speculation up to N concurrent requests, none above".

One table, `ENGINE_OPTIONS`: each row is an engine's option as upstream spells it today, the
syntax to write, the source file it was checked against and the engine version it applies to
(docs/engines.md prints the same table). A recommendation names the options of the engine
under test; an engine the table does not know (the simulator, a custom server) gets every
engine's rows.

The engines count the requests they are running (their batch), not the client's concurrency;
in a closed-loop sweep at steady state the two are close, so a crossover measured on C is a
reasonable first threshold, to be checked with a sweep of the configured server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# How much of a load-adaptive schedule (batch-size steps -> draft length, see schedule.py) an
# option can carry: "ranges" and "tiers" any schedule (vLLM's ranges, SGLang's per-batch-size
# tiers), "threshold" one draft length up to a batch size and none above, "fixed" one draft
# length (or none) at every load.
Carries = Literal["ranges", "tiers", "threshold", "fixed"]

# Profile engine keys (hosts.models.Engine values) and the names people know them by.
ENGINE_NAMES: dict[str, str] = {
    "llamacpp": "llama.cpp",
    "vllm": "vLLM",
    "sglang": "SGLang",
    "trtllm": "TensorRT-LLM",
}


@dataclass(frozen=True)
class EngineOptionSpec:
    """One row of the table. `syntax` is what to write, naming the option, as a format string:
    `{n}` is the largest batch size that keeps speculation, `{n1}` the first one without it."""

    engine: str  # a key of ENGINE_NAMES
    option: str
    syntax: str
    source: str
    version: str
    note: str
    switches_by_load: bool  # the option itself turns speculation off above a batch size
    carries: Carries

    def render(self, disable_above: int) -> EngineOption:
        value = self.syntax.format(n=disable_above, n1=disable_above + 1)
        return EngineOption(
            engine=ENGINE_NAMES[self.engine],
            setting=self.option,
            value=value,
            note=self.note,
            source=self.source,
            version=self.version,
        )


@dataclass(frozen=True)
class EngineOption:
    """A row of the table written out for one threshold."""

    engine: str
    setting: str
    value: str
    note: str
    source: str = ""
    version: str = ""


ENGINE_OPTIONS: tuple[EngineOptionSpec, ...] = (
    EngineOptionSpec(
        engine="llamacpp",
        option="--spec-type",
        syntax="--spec-type none on the server for loads above C={n} "
        "(--spec-type draft-simple -md DRAFT.gguf up to it)",
        source="https://github.com/ggml-org/llama.cpp/blob/master/common/arg.cpp "
        "(--spec-type, --spec-draft-model/-md)",
        version="llama.cpp 0c1e570, vendored in llama-cpp-python 0.3.36",
        note="llama-server has no load-dependent switch: speculation is fixed per server "
        "(-md alone loads the draft but drafts nothing without --spec-type draft-simple); route "
        "requests by load between a speculative and a plain server",
        switches_by_load=False,
        carries="fixed",
    ),
    EngineOptionSpec(
        engine="llamacpp",
        option="--spec-draft-n-max",
        syntax="--spec-draft-n-max N with a smaller N (default 3) if one server takes every load",
        source="https://github.com/ggml-org/llama.cpp/blob/master/common/arg.cpp "
        "(--spec-draft-n-max; --draft-max/--draft-min removed)",
        version="llama.cpp 0c1e570, vendored in llama-cpp-python 0.3.36",
        note="fewer draft tokens per verify step cost less when the batch is full; sweep "
        "it: it is the same at every load",
        switches_by_load=False,
        carries="fixed",
    ),
    EngineOptionSpec(
        engine="vllm",
        option="num_speculative_tokens_per_batch_size",
        syntax="num_speculative_tokens_per_batch_size=[[1, {n}, K], [{n1}, MAX_NUM_SEQS, 0]] "
        "in --speculative-config",
        source="https://github.com/vllm-project/vllm/blob/main/vllm/config/speculative.py "
        "(SpeculativeConfig), vllm/v1/spec_decode/dynamic/utils.py",
        version="vLLM 0.33",
        note="inclusive [start, end, K] ranges, the first starting at 1, sorted, "
        "non-overlapping; K=0 drafts nothing; ignored with data parallelism > 1. It replaces "
        "disable_by_batch_size, which no longer exists (vLLM refuses to start with it)",
        switches_by_load=True,
        carries="ranges",
    ),
    EngineOptionSpec(
        engine="sglang",
        option="--speculative-adaptive",
        syntax="--speculative-adaptive --speculative-adaptive-config FILE.json with "
        '{{"1": {{"candidate_steps": [S]}}, "{n1}": {{"candidate_steps": [0]}}}}',
        source="https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py "
        "(speculative_adaptive, speculative_adaptive_config), "
        "python/sglang/srt/speculative/adaptive_spec_params.py",
        version="SGLang 0.5.23",
        note="keys are batch sizes; the closest key <= the running batch (padded to a CUDA-graph "
        'batch size first) applies; [0] disables drafting (the built-in default has "64": [0]). '
        "EAGLE/EAGLE3 with topk 1 only; --speculative-num-steps must be among the candidates",
        switches_by_load=True,
        carries="tiers",
    ),
    EngineOptionSpec(
        engine="trtllm",
        option="max_concurrency",
        syntax="max_concurrency={n}",
        source="https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/llmapi/llm_args.py "
        "(DecodingBaseConfig.max_concurrency)",
        version="TensorRT-LLM main, December 2026",
        note="in speculative_config (trtllm-serve --extra_llm_api_options YAML): speculation is "
        "off at batch sizes above it; draft_len_schedule maps batch sizes to draft lengths",
        switches_by_load=True,
        carries="threshold",
    ),
)


def option_row(engine: str, option: str) -> EngineOptionSpec:
    """The table's row for one engine's option (KeyError-like ValueError when absent)."""
    for row in ENGINE_OPTIONS:
        if row.engine == engine and row.option == option:
            return row
    raise ValueError(f"no option {option!r} for engine {engine!r} in ENGINE_OPTIONS")


def options_for(engine: str) -> tuple[EngineOptionSpec, ...]:
    """The table's rows for one engine key; every row for an engine it does not know."""
    rows = tuple(row for row in ENGINE_OPTIONS if row.engine == engine)
    return rows or ENGINE_OPTIONS


def speculation_switches(disable_above: int, engine: str = "") -> tuple[EngineOption, ...]:
    """The options that keep speculation up to ``disable_above`` requests, off above, for
    ``engine`` (a profile's engine key), or for every engine in the table."""
    return tuple(row.render(disable_above) for row in options_for(engine))


def option_names(engine: str) -> str:
    """The table's options for a known engine, for advice without a threshold, e.g.
    "llama.cpp: --spec-type, --spec-draft-n-max"; "" for an engine the table does not know."""
    if engine not in ENGINE_NAMES:
        return ""
    names = ", ".join(row.option for row in ENGINE_OPTIONS if row.engine == engine)
    return f"{ENGINE_NAMES[engine]}: {names}"


def describe(options: tuple[EngineOption, ...]) -> str:
    """One clause for the verdict's text, e.g. "TensorRT-LLM max_concurrency=1"."""
    return "; ".join(f"{option.engine} {option.value}" for option in options)
