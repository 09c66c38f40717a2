from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import TypedDict

from .config import DEFAULT_STATE_DIR, STATE_DIR_ENV, SimConfig, default_state_dir
from .engine_flags import speculation_from_args
from .profiles import PROFILES, get_profile

DESCRIPTION = """\
Simulated LLM inference server (SGLang/vLLM-like HTTP API) with a continuous-batching
performance model: a decode step for b running requests lasts t(b) = t0 + k*b ms, plus a prefill
cost for each request admitted in that step. See docs/simulator.md."""


def _gpus(value: str) -> tuple[int, ...]:
    try:
        gpus = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of GPU indices: {value!r}") from None
    if not gpus:
        raise argparse.ArgumentTypeError("at least one GPU index is needed")
    return gpus


def _category_lengths(value: str) -> tuple[tuple[str, float], ...]:
    pairs: list[tuple[str, float]] = []
    for part in value.split(","):
        name, eq, length = part.strip().partition("=")
        try:
            pairs.append((name, float(length)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected name=length pairs: {value!r}") from None
        if not eq or not name:
            raise argparse.ArgumentTypeError(f"expected name=length pairs: {value!r}")
    return tuple(pairs)


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchlib.simulator",
        description=DESCRIPTION,
        formatter_class=_Formatter,
    )
    s = p.add_argument_group("server")
    s.add_argument("--host", default="127.0.0.1", help="address to bind")
    s.add_argument("--port", type=int, default=30000, help="port to bind (0: any free port)")
    s.add_argument("--model", default="specdash-sim", help="served model name")
    s.add_argument("--max-model-len", type=int, default=65536, help="context length limit")
    s.add_argument(
        "--default-max-tokens",
        type=int,
        default=256,
        help="chat completion length when the request sets none "
        "(completions default to 16, /generate to 128)",
    )
    s.add_argument(
        "--metrics-style",
        choices=("sglang", "vllm"),
        default="sglang",
        help="Prometheus metric names; also picks the worker process titles",
    )
    s.add_argument(
        "--http",
        choices=("daphne", "lean"),
        default="daphne",
        help="HTTP server under the app: Daphne, or a lean asyncio one (several times less CPU "
        "per streamed token: docs/simulator.md, 'HTTP server')",
    )
    s.add_argument("--truth-log", default=None, help="JSON-lines file of per-request ground truth")
    s.add_argument(
        "--controller-log",
        default=None,
        help="JSON-lines file of every switch of a load-adaptive schedule's draft length "
        "(time, from, to, running batch): the controller's ground truth",
    )
    s.add_argument(
        "--log-interval",
        type=float,
        default=10.0,
        help="seconds between 'Decode batch' log lines while busy",
    )

    m = p.add_argument_group("performance model (flags override the profile)")
    m.add_argument(
        "--profile", choices=sorted(PROFILES), default="baseline", help="built-in parameter set"
    )
    m.add_argument("--t0-ms", type=float, help="fixed cost of a decode step (ms)")
    m.add_argument("--k-ms", type=float, help="cost per running request in a step (ms)")
    m.add_argument("--max-running", type=int, help="maximum running batch; the rest queue")
    m.add_argument(
        "--kv-tokens", type=int, help="KV budget; a request reserves prompt+max_tokens at admission"
    )
    m.add_argument("--prefill-base-ms", type=float, help="prefill cost per admitted request (ms)")
    m.add_argument("--prefill-per-token-us", type=float, help="prefill cost per prompt token (us)")
    m.add_argument(
        "--accept-length",
        type=float,
        help="speculative: mean tokens per step (1 + accepted drafts)",
    )
    m.add_argument(
        "--sampled-accept-share",
        type=float,
        help="speculative: share of the drafts' gain (accept length - 1) a request that samples "
        "(temperature > 0) keeps (default 0.6; 1: sampling costs nothing)",
    )
    m.add_argument(
        "--category-accept-length",
        type=_category_lengths,
        default=None,
        help="speculative: accept length per prompt category (X-Specdash-Category header), "
        "e.g. chat=2.7,code=1.9",
    )
    m.add_argument(
        "--reasoning-accept-length",
        type=float,
        help="speculative, reasoning mode: accept length of the verify steps that start in a "
        "request's reasoning (eagle3: 3.2 against the answer's 2.6; dropped when --spec-steps "
        "leaves it impossible)",
    )
    m.add_argument(
        "--spec-steps",
        type=int,
        help="speculative: draft tokens per step (max accepted); 0 disables",
    )
    m.add_argument(
        "--off-t0-ms",
        type=float,
        help="speculative: t0 of a step that drafts nothing (a schedule's K=0; eagle3: baseline's)",
    )
    m.add_argument(
        "--off-k-ms",
        type=float,
        help="speculative: k of a step that drafts nothing (a schedule's K=0; eagle3: baseline's)",
    )
    m.add_argument(
        "--prefix-cache",
        action="store_true",
        help="cache chat message prefixes: a later turn prefills only what is new",
    )
    m.add_argument(
        "--reasoning-tokens",
        type=int,
        default=0,
        help="reasoning mode: the first N output tokens of a chat request stream as reasoning "
        "(vLLM 0.32: delta.reasoning; SGLang: delta.reasoning_content), then the answer",
    )
    m.add_argument(
        "--eos-prob",
        type=float,
        default=0.0,
        help="per-token pseudo-EOS probability for requests without ignore_eos "
        "(0: always generate max_tokens)",
    )
    m.add_argument(
        "--request-overhead-ms",
        type=float,
        default=0.0,
        help="delay before a request reaches the queue (tokenizer, HTTP)",
    )
    m.add_argument("--seed", type=int, default=0, help="seed for accept draws and pseudo-EOS")

    e = p.add_argument_group(
        "draft length per running batch, in the engines' own flags (docs/simulator.md, "
        '"Load-adaptive speculation"; a speculative profile drafts its --spec-steps without them)'
    )
    e.add_argument(
        "--speculative-config",
        metavar="JSON",
        help="vLLM (--metrics-style vllm): num_speculative_tokens, optionally "
        "num_speculative_tokens_per_batch_size [[start, end, K], ...]",
    )
    e.add_argument("--speculative-algorithm", help="SGLang: accepted (EAGLE/EAGLE3), not modelled")
    e.add_argument("--speculative-num-steps", type=int, help="SGLang: draft length (the largest)")
    e.add_argument("--speculative-eagle-topk", type=int, help="SGLang: 1 (a chain) with adaptive")
    e.add_argument(
        "--speculative-num-draft-tokens", type=int, help="SGLang: accepted, not modelled"
    )
    e.add_argument(
        "--speculative-adaptive",
        action="store_true",
        help="SGLang: draft length per batch size from --speculative-adaptive-config",
    )
    e.add_argument(
        "--speculative-adaptive-config",
        metavar="FILE",
        help='SGLang: {"<batch>": {"candidate_steps": [K]}, ...}',
    )
    e.add_argument(
        "--cuda-graph-bs",
        type=int,
        nargs="+",
        help="SGLang: CUDA-graph batch sizes a batch is padded to before the tier lookup "
        "(default: SGLang's speculative list up to --max-running)",
    )
    e.add_argument("--disable-cuda-graph-padding", action="store_true", help="SGLang: no padding")
    e.add_argument("--disable-cuda-graph", action="store_true", help="SGLang: no padding")

    g = p.add_argument_group("process and simulated GPUs")
    g.add_argument("--load-seconds", type=float, default=0.0, help="simulated model load time")
    g.add_argument(
        "--load-mode",
        choices=("health503", "no-listen"),
        default="health503",
        help="health503: listen at once, answer 503 while loading; no-listen: "
        "bind the port but listen only when loaded (connection refused)",
    )
    g.add_argument(
        "--workers",
        type=int,
        default=1,
        help="tensor-parallel worker processes (0: the main process holds the GPUs)",
    )
    g.add_argument(
        "--worker-title",
        default=None,
        help="worker process title template with {rank} (default "
        "sglang::scheduler_TP{rank}, or VLLM::Worker_TP{rank} for vllm metrics)",
    )
    g.add_argument("--gpus", type=_gpus, default="0", help="GPU indices this server uses, e.g. 0,1")
    g.add_argument(
        "--gpu-memory-gb",
        type=float,
        default=80.0,
        help="memory held per GPU (weights + static KV allocation)",
    )
    g.add_argument(
        "--state-dir",
        default=None,
        help=f"GPU inventory and ledger folder (default: ${STATE_DIR_ENV} or {DEFAULT_STATE_DIR})",
    )

    f = p.add_argument_group("faults")
    f.add_argument(
        "--fault-orphan-workers",
        action="store_true",
        help="workers survive the parent's death (SIGKILL, crash) and keep GPU memory",
    )
    f.add_argument(
        "--fault-ignore-sigterm",
        action="store_true",
        help="workers ignore SIGTERM (the parent then waits for them forever)",
    )
    f.add_argument(
        "--fault-setsid-workers",
        action="store_true",
        help="workers call setsid() and leave the process group and session",
    )
    f.add_argument(
        "--crash-after-requests",
        type=int,
        default=0,
        help="the main process exits abruptly (code 1) after N completed requests",
    )
    f.add_argument(
        "--fail-oom-at-start",
        action="store_true",
        help="print a CUDA out-of-memory error and exit 1 at start",
    )
    return p


_PROFILE_FLAGS = (
    "t0_ms",
    "k_ms",
    "max_running",
    "kv_tokens",
    "prefill_base_ms",
    "prefill_per_token_us",
    "accept_length",
    "spec_steps",
    "category_accept_length",
    "reasoning_accept_length",
    "sampled_accept_share",
    "off_t0_ms",
    "off_k_ms",
)


def parse_config(argv: Sequence[str] | None = None) -> SimConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    profile = get_profile(args.profile)
    overrides = {name: getattr(args, name) for name in _PROFILE_FLAGS}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if "accept_length" in overrides or "spec_steps" in overrides:
        steps = overrides.get("spec_steps", profile.spec_steps)
        overrides["speculative"] = (
            bool(steps) and overrides.get("accept_length", profile.accept_length) > 1.0
        )
        if overrides["speculative"] and not steps:
            parser.error("--accept-length > 1 needs --spec-steps")
    profile = profile.replace(**overrides)
    if profile.speculative and not 1.0 <= profile.accept_length <= profile.spec_steps + 1:
        parser.error("--accept-length must lie between 1 and spec-steps + 1")
    for name, length in profile.category_accept_length:
        if not profile.speculative or not 1.0 <= length <= profile.spec_steps + 1:
            parser.error(f"--category-accept-length {name}: needs speculation, 1..spec-steps + 1")
    reasoning = profile.reasoning_accept_length
    fits = profile.speculative and (reasoning is None or 1.0 <= reasoning <= profile.spec_steps + 1)
    if "reasoning_accept_length" in overrides and not fits:
        parser.error("--reasoning-accept-length: needs speculation, 1..spec-steps + 1")
    if not fits:
        # The profile's own value where --spec-steps made it impossible (or turned speculation
        # off): the reasoning then accepts as the answer does.
        profile = profile.replace(reasoning_accept_length=None)
    if not 0.0 <= profile.sampled_accept_share <= 1.0:
        parser.error("--sampled-accept-share must lie between 0 and 1")
    if args.workers < 0 or profile.max_running < 1 or profile.kv_tokens < 2:
        parser.error("--workers must be >= 0, --max-running >= 1, --kv-tokens >= 2")
    try:
        speculation = speculation_from_args(args, profile)
    except ValueError as exc:
        parser.error(str(exc))
    return SimConfig(
        profile=profile,
        speculation=speculation,
        host=args.host,
        port=args.port,
        model=args.model,
        max_model_len=min(args.max_model_len, profile.kv_tokens),
        default_max_tokens=args.default_max_tokens,
        eos_prob=args.eos_prob,
        reasoning_tokens=max(0, args.reasoning_tokens),
        prefix_cache=args.prefix_cache,
        request_overhead_ms=args.request_overhead_ms,
        seed=args.seed,
        metrics_style=args.metrics_style,
        load_seconds=args.load_seconds,
        load_mode=args.load_mode,
        workers=args.workers,
        gpus=args.gpus,
        gpu_memory_gb=args.gpu_memory_gb,
        state_dir=args.state_dir or default_state_dir(),
        truth_log=args.truth_log,
        controller_log=args.controller_log,
        fault_orphan_workers=args.fault_orphan_workers,
        fault_ignore_sigterm=args.fault_ignore_sigterm,
        fault_setsid_workers=args.fault_setsid_workers,
        crash_after_requests=args.crash_after_requests,
        fail_oom_at_start=args.fail_oom_at_start,
        log_interval=args.log_interval,
        worker_title=args.worker_title,
        http=args.http,
        **health_settings(os.environ),
    )


class HealthSettings(TypedDict, total=False):
    """The ``SimConfig`` fields that SGLang's environment switches set, where they are set."""

    health_check_timeout_s: float
    health_generation: bool


def health_settings(env: Mapping[str, str]) -> HealthSettings:
    """SGLang's own environment switches for its health endpoint, read as SGLang reads them."""
    out: HealthSettings = {}
    timeout = env.get("SGLANG_HEALTH_CHECK_TIMEOUT")
    if timeout:
        out["health_check_timeout_s"] = float(timeout)
    generation = env.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION")
    if generation:
        out["health_generation"] = generation.strip().lower() in ("1", "true", "yes", "on")
    return out
