"""A concrete vLLM speculative config that drafts up to N running requests and not above.

vLLM's `num_speculative_tokens_per_batch_size` (vllm/config/speculative.py; validated by
vllm/v1/spec_decode/dynamic/utils.py, checked on vLLM 0.32 and 0.33) is a list of inclusive
`[start, end, K]` batch-size ranges, the first starting at 1, sorted, non-overlapping; the
last range's K carries on to every larger batch size, so `[[1, N, K], [N+1, N+1, 0]]` means
"K draft tokens up to N running requests, none above".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

SETTING = "num_speculative_tokens_per_batch_size"


def vllm_schedule(disable_above: int, k: int) -> list[list[int]]:
    if disable_above < 1 or k < 1:
        raise ValueError("a schedule needs disable_above >= 1 and K >= 1")
    return [[1, disable_above, k], [disable_above + 1, disable_above + 1, 0]]


def vllm_speculative_config(argv: Sequence[str], disable_above: int) -> str | None:
    """The `--speculative-config` of a vLLM launch argv with the switch added (JSON), or None
    when the argv has no speculative config with a `num_speculative_tokens` to keep."""
    for i, arg in enumerate(argv):
        if arg.startswith("--speculative-config="):
            text = arg.split("=", 1)[1]
        elif arg in ("--speculative-config", "-sc") and i + 1 < len(argv):
            text = argv[i + 1]
        else:
            continue
        try:
            config: Any = json.loads(text)
        except json.JSONDecodeError:
            return None
        k = config.get("num_speculative_tokens") if isinstance(config, dict) else None
        if not isinstance(k, int) or k < 1:
            return None
        return json.dumps({**config, SETTING: vllm_schedule(disable_above, k)})
    return None
