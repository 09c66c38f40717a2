"""The draft length a server's launch argv configures, read where each engine states it.

One reader for everything that treats arms as variants of one server by draft length: the
schedule of a completed experiment (``schedule.py``) and its verification (``tuning.py``).
0 is a server that does not speculate; None is an argv that does not state one draft length
(the engine's default, a load-adaptive config, an argv the engine would refuse, another
engine). ``DRAFT_FLAGS`` says where each engine states it, for messages.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from benchlib.simulator.profiles import PROFILES
from benchlib.stats.schedule_configs import VLLM_SETTING

DRAFT_FLAGS = {
    "vllm": "num_speculative_tokens in --speculative-config",
    "sglang": "--speculative-num-steps",
    "llamacpp": "--spec-draft-n-max",
    "simulator": "--speculative-num-steps, num_speculative_tokens in --speculative-config "
    "(--metrics-style vllm), else --spec-steps or a --profile with its spec_steps",
}


def option(argv: Sequence[str], *names: str) -> str | None:
    """The value of the last ``--name value`` or ``--name=value`` in ``argv``."""
    found = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                found = argv[i + 1]
            elif arg.startswith(f"{name}="):
                found = arg.split("=", 1)[1]
    return found


def count(text: str | None) -> int | None:
    if text is None or not text.strip().isdigit():
        return None
    return int(text)


def _vllm_config(raw: str) -> int | None:
    try:
        config = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(config, dict) or VLLM_SETTING in config:
        return None  # not JSON, or already load-adaptive: no single draft length
    k = config.get("num_speculative_tokens")
    return k if isinstance(k, int) and not isinstance(k, bool) and k >= 0 else None


def _vllm(argv: Sequence[str]) -> int | None:
    raw = option(argv, "--speculative-config", "-sc")
    return 0 if raw is None else _vllm_config(raw)


def _sglang(argv: Sequence[str]) -> int | None:
    if "--speculative-adaptive" in argv:
        return None
    steps = option(argv, "--speculative-num-steps")
    if steps is None:
        # Without an algorithm SGLang does not speculate; with one, the step count is its
        # default, which the argv does not say.
        return 0 if option(argv, "--speculative-algorithm") is None else None
    return count(steps)


def _llamacpp(argv: Sequence[str]) -> int | None:
    n = option(argv, "--spec-draft-n-max")
    if n is not None:
        return count(n)
    spec_type = option(argv, "--spec-type")
    drafter = option(argv, "-md", "--model-draft")
    if drafter is None and spec_type in (None, "none"):
        return 0
    return None  # drafting with llama-server's default length, which the argv does not say


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _simulator(argv: Sequence[str]) -> int | None:
    """As ``simulator.cli.parse_config`` reads it: an engine flag (vLLM's config under
    ``--metrics-style vllm``, else SGLang's step count) sets the draft length over the
    profile; without one, the ``--profile`` with ``--spec-steps``/``--accept-length`` applied
    drafts its ``spec_steps`` when it speculates. A matrix's "off" and K variants are written
    with the engine flag on a speculative profile, so the profile alone would read 3 for each."""
    vllm_style = option(argv, "--metrics-style") == "vllm"
    config = option(argv, "--speculative-config")
    steps = option(argv, "--speculative-num-steps")
    if "--speculative-adaptive" in argv or (config is not None and steps is not None):
        return None  # load-adaptive, or both engines' flags (which the simulator refuses)
    if config is not None:
        return _vllm_config(config) if vllm_style else None
    if steps is not None:
        return None if vllm_style else count(steps)
    profile = PROFILES.get(option(argv, "--profile") or "baseline")
    if profile is None:
        return None
    spec_steps, accept = option(argv, "--spec-steps"), option(argv, "--accept-length")
    if spec_steps is None and accept is None:
        return profile.spec_steps if profile.speculative else 0
    k = count(spec_steps) if spec_steps is not None else profile.spec_steps
    length = _float(accept) if accept is not None else profile.accept_length
    if k is None or length is None:
        return None
    return k if k and length > 1.0 else 0  # the CLI: speculative = steps and accept > 1


_READERS = {"vllm": _vllm, "sglang": _sglang, "llamacpp": _llamacpp, "simulator": _simulator}


def draft_length(engine: str, argv: Sequence[str]) -> int | None:
    """Draft tokens per verify step the launch argv configures (0: no speculation); None
    when the argv does not say (an engine default, a load-adaptive config, another engine)."""
    reader = _READERS.get(engine)
    return reader([str(a) for a in argv]) if reader is not None else None
