"""The engines' speculative flags (vLLM's ``--speculative-config``, SGLang's
``--speculative-*`` and CUDA-graph flags) read into the draft length per batch size.

Kept apart from the command line (``cli.py``) because this is engine knowledge, not argument
parsing: each check follows the engine's own (``adaptive.py``), and ``virtual.py`` describes the
same schedule for the virtual clock.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .adaptive import (
    AdaptiveSpeculation,
    from_sglang_config,
    from_vllm_config,
    profile_for_draft_length,
    sglang_spec_cuda_graph_bs,
)
from .profiles import Profile

# The SGLang flags the command line declares; vLLM's one flag is ``speculative_config``.
_SGLANG_FLAGS = (
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_adaptive",
    "speculative_adaptive_config",
    "cuda_graph_bs",
    "disable_cuda_graph_padding",
    "disable_cuda_graph",
)


def speculation_from_args(args: argparse.Namespace, profile: Profile) -> AdaptiveSpeculation | None:
    """The draft length per batch size that the engine flags configure, checked as the engine
    checks them (adaptive.py) and against what the profile can simulate; ValueError says why
    not. None: no engine flag, the profile's own draft length at every batch size."""
    # Given: not the default (None, or False for a switch); a 0 is given (0 == False).
    sglang = [
        n for n in _SGLANG_FLAGS if getattr(args, n) is not None and getattr(args, n) is not False
    ]
    flag = "--" + (sglang[0] if sglang else "").replace("_", "-")
    if args.speculative_config is not None and sglang:
        raise ValueError(f"--speculative-config is vLLM's, {flag} SGLang's: one engine's flags")
    schedule: AdaptiveSpeculation | None = None
    if args.speculative_config is not None:
        if args.metrics_style != "vllm":
            raise ValueError(
                "--speculative-config is vLLM's flag: use it with --metrics-style vllm"
            )
        try:
            config = json.loads(args.speculative_config)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--speculative-config is not valid JSON: {exc}") from None
        if not isinstance(config, dict):
            raise ValueError("--speculative-config is not a JSON object")
        schedule = from_vllm_config(config)
    elif sglang:
        if args.metrics_style == "vllm":
            raise ValueError(f"{flag} is SGLang's flag: not with --metrics-style vllm")
        schedule = _sglang_schedule(args, profile)
    for k in sorted(set(schedule.lengths)) if schedule else ():
        profile_for_draft_length(profile, k)  # refuses what the profile cannot simulate
    return schedule


def _sglang_schedule(args: argparse.Namespace, profile: Profile) -> AdaptiveSpeculation | None:
    steps = args.speculative_num_steps
    if steps is not None and steps < 0:
        raise ValueError("--speculative-num-steps must be >= 0")
    if args.disable_cuda_graph or args.disable_cuda_graph_padding:
        graphs: tuple[int, ...] = ()
    elif args.cuda_graph_bs:
        graphs = tuple(args.cuda_graph_bs)
    else:
        graphs = sglang_spec_cuda_graph_bs(profile.max_running)
    if not args.speculative_adaptive:
        if args.speculative_adaptive_config is not None:
            raise ValueError("--speculative-adaptive-config without --speculative-adaptive")
        return None if steps is None else AdaptiveSpeculation("sglang", (1,), (steps,), graphs)
    if args.speculative_adaptive_config is None or steps is None:
        raise ValueError(
            "--speculative-adaptive needs --speculative-adaptive-config and --speculative-num-steps"
        )
    if args.speculative_eagle_topk not in (None, 1):
        raise ValueError("--speculative-adaptive needs --speculative-eagle-topk 1 (a chain)")
    path = args.speculative_adaptive_config
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"--speculative-adaptive-config {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"--speculative-adaptive-config {path} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"--speculative-adaptive-config {path} is not a JSON object")
    return from_sglang_config(config, num_steps=steps, cuda_graph_bs=graphs)
