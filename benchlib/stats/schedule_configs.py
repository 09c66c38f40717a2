"""A speculation schedule (``schedule.Step``s: batch sizes -> draft length, 0 = off) written as
each engine's configuration, with the option's source and version from ``engines.ENGINE_OPTIONS``.

What each engine can take (docs/engines.md, "A load-adaptive schedule per engine"; the rules as
the sources the table names state them, and nothing they do not state):

* vLLM: ``num_speculative_tokens_per_batch_size`` in ``--speculative-config``: inclusive
  ``[start, end, K]`` ranges, the first starting at 1, sorted, non-overlapping, K >= 0.
  ``vllm_check`` re-implements exactly those rules. With ``max_num_seqs`` the last range ends
  there (the reference's own example, ``[[1, 8, 3], [9, 1024, 0]]``); without it the last range
  is one batch size wide and its K carries on above, as ``speculative_schedule`` writes it.
  ``num_speculative_tokens`` is set to the schedule's largest K: no step drafts more than a
  variant that was measured.
* SGLang: ``--speculative-adaptive --speculative-adaptive-config FILE.json`` with batch-size
  keys -> ``{"candidate_steps": [K]}``; the closest key <= the running batch (padded to a
  CUDA-graph batch size first) applies, so one key per step start is the whole schedule.
  ``--speculative-num-steps`` must be among the candidates: the largest K is written.
* TensorRT-LLM: ``max_concurrency`` is an on/off threshold: only "K up to N, none above"
  (or one K everywhere) can be expressed.
* llama.cpp: no load-dependent knob: only one draft length at every load can be expressed.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchlib.json_types import JsonObject
from benchlib.stats.engines import ENGINE_NAMES, EngineOptionSpec, option_row
from benchlib.stats.schedule import Step

VLLM_SETTING = "num_speculative_tokens_per_batch_size"
SGLANG_CONFIG_FILE = "speculative_adaptive.json"


@dataclass(frozen=True)
class EngineSchedule:
    """One engine's configuration for a schedule. ``exact``: the engine applies the schedule
    as derived; otherwise ``value`` is "" and ``note`` says what it cannot express."""

    engine: str
    option: str
    exact: bool
    value: str  # argv to paste (shell-quoted), "" when the schedule cannot be expressed
    note: str
    source: str
    version: str
    file_name: str = ""  # a file the argv names, and its contents
    file_text: str = ""


def check_steps(steps: Sequence[Step]) -> None:
    """Steps cover every batch size from 1 up, in order, without gaps or overlaps."""
    if not steps:
        raise ValueError("a schedule needs at least one step")
    expected = 1
    for i, step in enumerate(steps):
        if step.start != expected:
            raise ValueError(f"step {i} starts at {step.start}, expected {expected}")
        if step.draft_length < 0:
            raise ValueError(f"step {i}: draft length must be >= 0")
        if step.end is None:
            if i != len(steps) - 1:
                raise ValueError(f"step {i} has no end but is not the last")
            return
        if step.end < step.start:
            raise ValueError(f"step {i} ends ({step.end}) before it starts ({step.start})")
        expected = step.end + 1
    raise ValueError("the last step must have no end (it covers every larger batch size)")


def _max_k(steps: Sequence[Step]) -> int:
    return max(step.draft_length for step in steps)


def vllm_ranges(steps: Sequence[Step], *, max_num_seqs: int | None = None) -> list[list[int]]:
    """``num_speculative_tokens_per_batch_size`` for ``steps`` (see the module notes)."""
    check_steps(steps)
    ranges = [[s.start, s.end, s.draft_length] for s in steps if s.end is not None]
    last = steps[-1]
    if max_num_seqs is not None and max_num_seqs < last.start:
        raise ValueError(f"max_num_seqs {max_num_seqs} is below the last step ({last.start})")
    end = last.start if max_num_seqs is None else max_num_seqs
    ranges.append([last.start, end, last.draft_length])
    vllm_check(ranges)
    return ranges


def vllm_check(ranges: Any) -> None:
    """vLLM's rules for ``num_speculative_tokens_per_batch_size`` as the reference lists them:
    a list of inclusive ``[start, end, K]`` integer ranges, the first starting at 1, sorted,
    non-overlapping, K >= 0. Raises ValueError naming the rule broken."""
    if not isinstance(ranges, list) or not ranges:
        raise ValueError(f"{VLLM_SETTING} must be a non-empty list of [start, end, K]")
    previous_end = 0
    for i, entry in enumerate(ranges):
        if (
            not isinstance(entry, list)
            or len(entry) != 3
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in entry)
        ):
            raise ValueError(f"entry {i} ({entry!r}) is not [start, end, K] of integers")
        start, end, k = entry
        if i == 0 and start != 1:
            raise ValueError(f"the first range must start at 1, not {start}")
        if end < start:
            raise ValueError(f"entry {i}: end {end} is below start {start} (inclusive range)")
        if start <= previous_end:
            raise ValueError(
                f"entry {i} starts at {start}, inside or before the previous range "
                f"(ending {previous_end}): ranges must be sorted and non-overlapping"
            )
        if k < 0:
            raise ValueError(f"entry {i}: K must be >= 0, not {k}")
        previous_end = end


def vllm_speculative_config_for(
    steps: Sequence[Step], base: Mapping[str, Any] | None = None, *, max_num_seqs: int | None = None
) -> JsonObject | None:
    """``base`` (a variant's speculative config: method, model) with the schedule; None when
    the schedule never drafts (serve without a speculative config)."""
    check_steps(steps)
    k = _max_k(steps)
    if k == 0:
        return None
    config: JsonObject = {**(base or {}), "num_speculative_tokens": k}
    config.pop(VLLM_SETTING, None)
    if len(steps) > 1:
        config[VLLM_SETTING] = vllm_ranges(steps, max_num_seqs=max_num_seqs)
    return config


def sglang_adaptive_config(steps: Sequence[Step]) -> dict[str, dict[str, list[int]]]:
    """The ``--speculative-adaptive-config`` file: one tier per step, keyed by its start."""
    check_steps(steps)
    return {str(step.start): {"candidate_steps": [step.draft_length]} for step in steps}


def sglang_check(config: Any, num_steps: int) -> None:
    """The reference's rules for SGLang's adaptive config: batch-size keys mapped to
    ``{"candidate_steps": [...]}``, and ``--speculative-num-steps`` among the candidates."""
    if not isinstance(config, dict) or not config:
        raise ValueError("the adaptive config must be a non-empty JSON object")
    candidates: set[int] = set()
    for key, tier in config.items():
        if not (isinstance(key, str) and key.isdigit() and int(key) >= 1):
            raise ValueError(f"key {key!r} is not a batch size")
        steps = tier.get("candidate_steps") if isinstance(tier, dict) else None
        if not isinstance(steps, list) or not steps:
            raise ValueError(f'tier {key}: expected {{"candidate_steps": [...]}}, got {tier!r}')
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps):
            raise ValueError(f"tier {key}: candidate steps must be integers >= 0")
        candidates.update(steps)
    if num_steps not in candidates:
        raise ValueError(
            f"--speculative-num-steps {num_steps} is not among the candidates {sorted(candidates)}"
        )


def threshold(steps: Sequence[Step]) -> int | None:
    """N for a schedule "one K from 1 to N, none above"; None for any other shape."""
    check_steps(steps)
    if len(steps) == 2 and steps[0].draft_length > 0 and steps[1].draft_length == 0:
        return steps[0].end
    return None


def expressible(steps: Sequence[Step], row: EngineOptionSpec) -> bool:
    """Whether ``row``'s option can carry the schedule (``EngineOptionSpec.carries``)."""
    check_steps(steps)
    if row.carries in ("ranges", "tiers") or len(steps) == 1:
        return True
    return row.carries == "threshold" and threshold(steps) is not None


def _entry(
    row: EngineOptionSpec, exact: bool, value: str, note: str, **file: str
) -> EngineSchedule:
    return EngineSchedule(
        engine=ENGINE_NAMES[row.engine],
        option=row.option,
        exact=exact,
        value=value,
        note=note,
        source=row.source,
        version=row.version,
        **file,
    )


def _lengths(steps: Sequence[Step]) -> str:
    return ", ".join(
        f"{s.start}+: {s.draft_length}" if s.end is None else f"{s.start}-{s.end}: {s.draft_length}"
        for s in steps
    )


def vllm_schedule_entry(
    steps: Sequence[Step], base: Mapping[str, Any] | None = None, *, max_num_seqs: int | None = None
) -> EngineSchedule:
    row = option_row("vllm", VLLM_SETTING)
    config = vllm_speculative_config_for(steps, base, max_num_seqs=max_num_seqs)
    if config is None:
        return _entry(
            row, True, "", "the schedule never drafts: serve without --speculative-config"
        )
    note = "num_speculative_tokens is the schedule's largest draft length"
    if max_num_seqs is None and len(steps) > 1:
        note += "; the last range's K carries on to every larger batch size"
    return _entry(row, True, shlex.join(["--speculative-config", json.dumps(config)]), note)


def sglang_schedule_entry(steps: Sequence[Step]) -> EngineSchedule:
    row = option_row("sglang", "--speculative-adaptive")
    k = _max_k(steps)
    if k == 0:
        return _entry(row, True, "", "the schedule never drafts: serve without speculation")
    if len(steps) == 1:
        value = shlex.join(["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"])
        return _entry(row, True, value, "one draft length at every load: no adaptive config")
    config = sglang_adaptive_config(steps)
    sglang_check(config, k)
    argv = ["--speculative-adaptive", "--speculative-adaptive-config", SGLANG_CONFIG_FILE]
    argv += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"]
    note = (
        "keep --speculative-num-draft-tokens as the profile sets it (SGLang takes all three of "
        "steps, topk, draft tokens or none); a switch at N takes effect from the first batch "
        "that pads to a CUDA-graph batch size >= N"
    )
    return _entry(
        row,
        True,
        shlex.join(argv),
        note,
        file_name=SGLANG_CONFIG_FILE,
        file_text=json.dumps(config, indent=2) + "\n",
    )


def trtllm_schedule_entry(steps: Sequence[Step]) -> EngineSchedule:
    row = option_row("trtllm", "max_concurrency")
    check_steps(steps)
    if len(steps) == 1:
        k = steps[0].draft_length
        note = (
            "the schedule never drafts: serve without speculative_config"
            if k == 0
            else "one draft length at every load: no max_concurrency"
        )
        return _entry(row, True, "", note)
    n = threshold(steps)
    if n is None or not expressible(steps, row):
        note = (
            f"max_concurrency only turns drafting off above a batch size; this schedule "
            f"({_lengths(steps)}) needs more than one draft length or drafting above a "
            "non-drafting band. TensorRT-LLM's draft_len_schedule maps load to a draft length, "
            "but its syntax is not checked here, so it is not written"
        )
        return _entry(row, False, "", note)
    return _entry(row, True, row.render(n).value, "in speculative_config")


def llamacpp_schedule_entry(steps: Sequence[Step]) -> EngineSchedule:
    row = option_row("llamacpp", "--spec-draft-n-max")
    if not expressible(steps, row):
        note = (
            f"llama-server has no load-dependent knob: a schedule ({_lengths(steps)}) needs "
            "one server per draft length and routing by load"
        )
        return _entry(row, False, "", note)
    k = steps[0].draft_length
    if k == 0:
        return _entry(row, True, "--spec-type none", "no speculation at any load")
    value = shlex.join(["--spec-type", "draft-simple", "--spec-draft-n-max", str(k)])
    return _entry(row, True, value, "with -md DRAFT.gguf")


def engine_schedules(
    steps: Sequence[Step],
    engine: str = "",
    *,
    vllm_base: Mapping[str, Any] | None = None,
    max_num_seqs: int | None = None,
) -> tuple[EngineSchedule, ...]:
    """The schedule for ``engine`` (a profile's engine key), or for every engine in the table."""
    writers = {
        "vllm": lambda: vllm_schedule_entry(steps, vllm_base, max_num_seqs=max_num_seqs),
        "sglang": lambda: sglang_schedule_entry(steps),
        "trtllm": lambda: trtllm_schedule_entry(steps),
        "llamacpp": lambda: llamacpp_schedule_entry(steps),
    }
    keys = [engine] if engine in writers else list(ENGINE_NAMES)
    return tuple(writers[key]() for key in keys)
