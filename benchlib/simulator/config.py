from __future__ import annotations

import os
from dataclasses import dataclass, field

from .adaptive import AdaptiveSpeculation
from .profiles import PROFILES, Profile

DEFAULT_STATE_DIR = "/tmp/specdash-sim-gpu"  # noqa: S108 (a shared, well-known location)
STATE_DIR_ENV = "SPECDASH_SIM_STATE_DIR"


def default_state_dir() -> str:
    return os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR


@dataclass(frozen=True)
class SimConfig:
    profile: Profile = field(default_factory=lambda: PROFILES["baseline"])
    # Draft length per running batch size, from the engines' own flags (vLLM's
    # --speculative-config, SGLang's --speculative-adaptive / --speculative-num-steps);
    # None: the profile's own spec_steps at every batch size.
    speculation: AdaptiveSpeculation | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    model: str = "specdash-sim"
    max_model_len: int = 65536
    default_max_tokens: int = 256
    eos_prob: float = 0.0
    # Reasoning mode: a chat request's first N output tokens stream as reasoning, the rest as
    # the answer (encode.StreamEncoder: vLLM's and SGLang's delta fields).
    reasoning_tokens: int = 0
    # A prefix cache for chat: a request whose leading messages an earlier request sent has
    # their tokens cached, and prefill costs only the rest (as vLLM's and SGLang's caches do
    # for whole blocks). Off: every prompt token is prefilled.
    prefix_cache: bool = False
    request_overhead_ms: float = 0.0
    seed: int = 0
    metrics_style: str = "sglang"
    load_seconds: float = 0.0
    load_mode: str = "health503"
    workers: int = 1
    gpus: tuple[int, ...] = (0,)
    gpu_memory_gb: float = 80.0
    state_dir: str = DEFAULT_STATE_DIR
    truth_log: str | None = None
    # JSON lines, one per switch of a load-adaptive schedule's draft length (the controller's
    # truth: when, from which K to which, at which running batch).
    controller_log: str | None = None
    fault_orphan_workers: bool = False
    fault_ignore_sigterm: bool = False
    fault_setsid_workers: bool = False
    crash_after_requests: int = 0
    fail_oom_at_start: bool = False
    log_interval: float = 10.0
    # The HTTP server under the ASGI app: "daphne" or "lean" (lean.py; docs/simulator.md).
    http: str = "daphne"
    worker_title: str | None = None
    # SGLang's health endpoint (SGLang mode): after warm-up, each call sleeps this long, then
    # answers 200 if the scheduler produced output meanwhile (an idle one runs a 1-token
    # generation for it), else sleeps again until `health_check_timeout_s`, then 503.
    health_check_interval_s: float = 1.0
    health_check_timeout_s: float = 20.0  # SGLANG_HEALTH_CHECK_TIMEOUT
    health_generation: bool = True  # SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION (/health only)

    @property
    def ranks(self) -> int:
        return max(1, self.workers)

    def title_for(self, rank: int) -> str:
        template = self.worker_title
        if template is None:
            template = (
                "VLLM::Worker_TP{rank}"
                if self.metrics_style == "vllm"
                else ("sglang::scheduler_TP{rank}")
            )
        return template.format(rank=rank)
