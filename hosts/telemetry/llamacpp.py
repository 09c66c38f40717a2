"""llama.cpp's `llama-server` metrics mapped to the common set.

Checked against a real build: llama.cpp 0c1e570 as vendored in the llama-cpp-python 0.3.36
sdist (tools/server/server-task.cpp, the `/metrics` handler; `--metrics` turns it on), whose
exposition is recorded in tests/hosts/telemetry/data/llamacpp_real_scrape*.prom. Older spellings sit
after the current ones so that earlier releases still read.

Speculation (`-md DRAFT --spec-type draft-simple`): `spec_decode_num_drafts_total` counts
verify steps (server-context.cpp: `n_draft_verif_steps`, one per slot per step), and
`spec_decode_num_accepted_tokens_total` the draft tokens the target accepted, without the
target's own token of each step; so accept length = 1 + accepted / drafts (the server's own
"mean_acc_len" in its log), and acceptance rate = accepted / draft tokens.
"""

from __future__ import annotations

# Plain names keyed by the common keys' values (engine_profiles.GaugeKey / CounterKey), so that
# engine_profiles builds the profile from them without an import cycle.
GAUGES: dict[str, tuple[str, ...]] = {
    "running_requests": ("llamacpp:requests_processing",),
    "queued_requests": ("llamacpp:requests_deferred",),
    # `llamacpp:predicted_tokens_seconds` is deliberately absent: it is tokens per second of
    # decode time per slot, not wall-clock throughput, so the counter rate is used.
    "kv_usage": ("llamacpp:kv_cache_usage_ratio",),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "prompt_tokens": ("llamacpp:prompt_tokens_total",),
    "generation_tokens": ("llamacpp:tokens_predicted_total", "llamacpp:n_tokens_predicted_total"),
    "spec_drafts": ("llamacpp:spec_decode_num_drafts_total",),
    "spec_draft_tokens": (
        "llamacpp:spec_decode_num_draft_tokens_total",
        "llamacpp:n_drafted_total",
        "llamacpp:tokens_drafted_total",
    ),
    "spec_accepted_tokens": (
        "llamacpp:spec_decode_num_accepted_tokens_total",
        "llamacpp:n_accepted_total",
        "llamacpp:n_drafted_accepted_total",
        "llamacpp:tokens_drafted_accepted_total",
    ),
}
