"""Load-adaptive speculation as the engines read their configuration: the draft length of a
decode step chosen from the running batch size.

Two readings, following docs/engines.md ("A load-adaptive schedule per engine") and the
sources it names:

* vLLM 0.33 (vllm/config/speculative.py, vllm/v1/spec_decode/dynamic/utils.py):
  ``num_speculative_tokens_per_batch_size`` in the speculative config, inclusive
  ``[start, end, K]`` ranges checked by ``schedule_configs.vllm_check``; a batch uses the range
  that contains it, and a batch above the last range that range's K (the last K carries on, as
  ``benchlib/stats/speculative_schedule.py`` writes it). Without the setting every batch
  drafts ``num_speculative_tokens``.
* SGLang 0.5.23 (server_args.py, speculative/adaptive_spec_params.py): batch-size keys ->
  ``{"candidate_steps": [...]}``. The running batch is first padded to a CUDA-graph batch size
  (the smallest one >= it), then the closest key <= the padded size applies.

What the reference does not say, the simulator refuses rather than guesses: a vLLM schedule
with a gap between ranges, an SGLang config without a key at or below the smallest batch, a
tier with several candidate steps (SGLang picks among them at run time by a rule not modelled
here). A batch above the largest CUDA-graph batch size runs unpadded (no graph to pad to).
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from benchlib.stats.schedule_configs import VLLM_SETTING, sglang_check, vllm_check

from .model import acceptance_probability
from .profiles import Profile


@dataclass(frozen=True)
class AdaptiveSpeculation:
    """Draft length per running batch size. ``starts``/``lengths``: from batch ``starts[i]``
    (after padding, for SGLang) on, ``lengths[i]`` draft tokens, until the next start."""

    engine: Literal["vllm", "sglang"]
    starts: tuple[int, ...]
    lengths: tuple[int, ...]
    cuda_graph_bs: tuple[int, ...] = ()

    def padded(self, batch: int) -> int:
        """The batch size the lookup sees: SGLang pads to a CUDA-graph batch size first."""
        i = bisect.bisect_left(self.cuda_graph_bs, batch)
        return self.cuda_graph_bs[i] if i < len(self.cuda_graph_bs) else batch

    def draft_length(self, batch: int) -> int:
        """Draft tokens of a decode step that runs ``batch`` requests (0 = no drafting)."""
        if batch < 1:
            raise ValueError("a decode step runs at least one request")
        i = bisect.bisect_right(self.starts, self.padded(batch)) - 1
        return self.lengths[i]

    @property
    def max_draft_length(self) -> int:
        return max(self.lengths)


def from_vllm_config(config: Mapping[str, Any]) -> AdaptiveSpeculation:
    """The schedule of a vLLM speculative config (the ``--speculative-config`` JSON)."""
    ranges = config.get(VLLM_SETTING)
    if ranges is None:
        k = config.get("num_speculative_tokens")
        if not isinstance(k, int) or k < 0:
            raise ValueError("the speculative config has no num_speculative_tokens")
        return AdaptiveSpeculation("vllm", (1,), (k,))
    vllm_check(ranges)
    most = config.get("num_speculative_tokens")
    if isinstance(most, int) and max(r[2] for r in ranges) > most:
        raise ValueError(
            f"a range drafts {max(r[2] for r in ranges)} tokens, more than "
            f"num_speculative_tokens {most}: what vLLM does then is not documented, so the "
            "simulator does not guess"
        )
    for (_, end, _), (start, _, _) in itertools.pairwise(ranges):
        if start != end + 1:
            raise ValueError(
                f"batch sizes {end + 1}-{start - 1} fall between two ranges: what vLLM does "
                "there is not documented, so the simulator does not guess"
            )
    return AdaptiveSpeculation("vllm", tuple(r[0] for r in ranges), tuple(r[2] for r in ranges))


def from_sglang_config(
    config: Mapping[str, Any], *, num_steps: int, cuda_graph_bs: Sequence[int] = ()
) -> AdaptiveSpeculation:
    """The schedule of an SGLang ``--speculative-adaptive-config`` with its
    ``--speculative-num-steps`` and the server's CUDA-graph batch sizes."""
    sglang_check(dict(config), num_steps)
    tiers = sorted((int(key), tier["candidate_steps"]) for key, tier in config.items())
    if tiers[0][0] != 1:
        raise ValueError(
            f"no tier for batch sizes below {tiers[0][0]}: what SGLang does there is not "
            "documented, so the simulator does not guess"
        )
    for key, candidates in tiers:
        if len(candidates) != 1:
            raise ValueError(
                f"tier {key} has candidates {candidates}: SGLang picks among several at run "
                "time by a rule the simulator does not model; give one per tier"
            )
    graphs = tuple(sorted(set(cuda_graph_bs)))
    if graphs and graphs[0] < 1:
        raise ValueError("CUDA-graph batch sizes are >= 1")
    return AdaptiveSpeculation(
        "sglang", tuple(key for key, _ in tiers), tuple(c[0] for _, c in tiers), graphs
    )


def _option(argv: Sequence[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        for name in names:
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
    return None


def from_argv(
    argv: Sequence[str],
    *,
    cuda_graph_bs: Sequence[int] = (),
    read_text: Callable[[str], str] = lambda path: Path(path).read_text(),
) -> AdaptiveSpeculation | None:
    """The schedule an engine's launch argv configures: vLLM's ``--speculative-config`` or
    SGLang's ``--speculative-adaptive`` with its config file; None when it has neither."""
    vllm = _option(argv, "--speculative-config", "-sc")
    if vllm is not None:
        config = json.loads(vllm)
        if not isinstance(config, dict):
            raise ValueError("--speculative-config is not a JSON object")
        return from_vllm_config(config)
    if "--speculative-adaptive" not in argv:
        return None
    path = _option(argv, "--speculative-adaptive-config")
    steps = _option(argv, "--speculative-num-steps")
    if path is None or steps is None:
        raise ValueError(
            "--speculative-adaptive needs --speculative-adaptive-config and --speculative-num-steps"
        )
    config = json.loads(read_text(path))
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a JSON object")
    return from_sglang_config(config, num_steps=int(steps), cuda_graph_bs=cuda_graph_bs)


def accept_length_for(accept_length: float, spec_steps: int, draft_length: int) -> float:
    """Tokens per verify step with ``draft_length`` drafts, at the per-token acceptance that
    gives ``accept_length`` with ``spec_steps`` drafts (model.acceptance_probability): the
    same drafter proposing a shorter or longer chain."""
    if draft_length == 0:
        return 1.0
    p = acceptance_probability(accept_length, spec_steps)
    return 1.0 + sum(p**i for i in range(1, draft_length + 1))


def sglang_spec_cuda_graph_bs(max_bs: int) -> tuple[int, ...]:
    """SGLang's CUDA-graph batch sizes when speculation is on and ``--cuda-graph-bs`` is not
    given (server_args.py, ``_generate_cuda_graph_batch_sizes``, speculative branch), up to
    ``max_bs``. Read from SGLang's main-branch source; not checked against 0.5.23."""
    sizes = [
        *range(1, 9),
        *range(10, 33, 2),
        *range(40, 65, 4),
        *range(72, 257, 8),
        *range(272, max_bs + 1, 16),
    ]
    return tuple(bs for bs in sizes if bs <= max_bs)


def profile_for_draft_length(profile: Profile, draft_length: int) -> Profile:
    """The profile of a decode step that drafts ``draft_length`` tokens per request, on a server
    calibrated at ``profile.spec_steps`` drafts (docs/simulator.md, "Load-adaptive speculation").

    K = spec_steps is the profile itself; K = 0 costs the profile's ``off_t0_ms``/``off_k_ms``
    and emits one token; in between and beyond, t0 and k move linearly in K (each draft token
    adds one fixed draft pass and one verify token per request) and the accept length (each
    category's and the reasoning phase's alike) is that of a chain of K at the profile's
    per-token acceptance (``accept_length_for``)."""
    if draft_length < 0:
        raise ValueError(f"draft length {draft_length} is below 0")
    steps = profile.spec_steps
    if profile.speculative and steps > 0 and draft_length == steps:
        return profile
    if not (profile.speculative and steps > 0):
        if draft_length == 0:
            return profile
        raise ValueError(
            f"drafting {draft_length} tokens needs a speculative profile (a drafter): "
            "--profile eagle3, or --accept-length with --spec-steps"
        )
    off_t0, off_k = profile.off_t0_ms, profile.off_k_ms
    if off_t0 is None or off_k is None:
        raise ValueError(
            f"profile {profile.name!r} has no cost of a step without drafts, so other draft "
            "lengths than --spec-steps cannot be simulated: give --off-t0-ms and --off-k-ms"
        )
    if draft_length == 0:
        return profile.replace(
            t0_ms=off_t0,
            k_ms=off_k,
            speculative=False,
            accept_length=1.0,
            spec_steps=0,
            category_accept_length=(),
            reasoning_accept_length=None,
        )
    share = draft_length / steps
    return profile.replace(
        t0_ms=off_t0 + (profile.t0_ms - off_t0) * share,
        k_ms=off_k + (profile.k_ms - off_k) * share,
        spec_steps=draft_length,
        accept_length=accept_length_for(profile.accept_length, steps, draft_length),
        category_accept_length=tuple(
            (name, accept_length_for(length, steps, draft_length))
            for name, length in profile.category_accept_length
        ),
        reasoning_accept_length=(
            None
            if profile.reasoning_accept_length is None
            else accept_length_for(profile.reasoning_accept_length, steps, draft_length)
        ),
    )
