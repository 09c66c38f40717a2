"""The engines' documented syntax for load-adaptive speculation, quoted, with its source.

Quoted verbatim from the project's engine reference (section "Load-adaptive speculation, per
engine", and the vLLM/SGLang launch lines), which was written from the sources named below.
Nothing here is written from memory: a form the reference does not state is not quoted.
"""

from __future__ import annotations

VLLM_SOURCE = (
    "vLLM 0.33: vllm/config/speculative.py (SpeculativeConfig), "
    "vllm/v1/spec_decode/dynamic/utils.py"
)
# "The control is `num_speculative_tokens_per_batch_size` in the speculative config: a list of
# inclusive `[start, end, K]` ranges, the first starting at 1, sorted, non-overlapping, K >= 0
# (0 = no drafting), e.g. `[[1, 8, 3], [9, 1024, 0]]`"
VLLM_SETTING = "num_speculative_tokens_per_batch_size"
VLLM_EXAMPLE = "[[1, 8, 3], [9, 1024, 0]]"
# "speculative: `--speculative-config '{"method":"eagle3","model":"D","num_speculative_tokens":3}'`"
VLLM_LAUNCH = (
    """--speculative-config '{"method":"eagle3","model":"D","num_speculative_tokens":3}'"""
)

SGLANG_SOURCE = (
    "SGLang 0.5.23: python/sglang/srt/server_args.py (speculative_adaptive, "
    "speculative_adaptive_config), python/sglang/srt/speculative/adaptive_spec_params.py"
)
# "`--speculative-adaptive` plus `--speculative-adaptive-config FILE.json`, batch-size keys
# mapped to `{"candidate_steps": [...]}`; `[0]` disables drafting for that tier, and the
# built-in default already has `"64": {"candidate_steps": [0]}`. The running batch size is first
# padded to a CUDA-graph batch size, then the closest key <= it applies. [...]
# `--speculative-num-steps` must be among the candidates"
SGLANG_FLAGS = "--speculative-adaptive --speculative-adaptive-config FILE.json"
SGLANG_DEFAULT_TIER = '"64": {"candidate_steps": [0]}'
