"""Engine presets: the defaults an operator would otherwise look up in each engine's docs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hosts.models import ServerProfile


@dataclass(frozen=True)
class EnginePreset:
    port: int
    readiness_path: str
    metrics_path: str
    argv_template: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


PRESETS: dict[str, EnginePreset] = {
    "sglang": EnginePreset(
        port=30000,
        readiness_path="/health",
        metrics_path="/metrics",
        # /metrics exists only with --enable-metrics.
        argv_template=[
            "python3", "-m", "sglang.launch_server", "--model-path", "MODEL",
            "--host", "127.0.0.1", "--port", "30000", "--enable-metrics",
        ],
    ),
    "vllm": EnginePreset(
        port=8000,
        readiness_path="/health",
        metrics_path="/metrics",
        argv_template=["vllm", "serve", "MODEL", "--host", "127.0.0.1", "--port", "8000"],
    ),
    "llamacpp": EnginePreset(
        port=8080,
        readiness_path="/health",  # 503 while loading, then 200
        metrics_path="/metrics",  # only with --metrics
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
        readiness_path="/health",
        metrics_path="/metrics",
        argv_template=[
            "python3", "-m", "benchmarks.simulator", "--host", "127.0.0.1",
            "--port", "30000", "--profile", "baseline",
        ],
    ),
    "custom": EnginePreset(port=8000, readiness_path="/health", metrics_path=""),
}  # fmt: skip


def llamacpp_argv(
    binary: str,
    model: str,
    *,
    port: int,
    draft: str | None = None,
    draft_n_max: int = 3,
    slots: int = 4,
    context: int = 0,
    threads: int | None = None,
) -> list[str]:
    """A llama-server command line (the preset's, filled in): with `draft`, speculative."""
    argv = [binary, "-m", model]
    if draft is not None:
        argv += ["-md", draft, "--spec-type", "draft-simple"]
        argv += ["--spec-draft-n-max", str(draft_n_max)]
    argv += ["-np", str(slots), "--host", "127.0.0.1", "--port", str(port), "--metrics"]
    if context:
        argv += ["-c", str(context)]  # total: each slot gets context / slots
    if threads is not None:
        argv += ["-t", str(threads), "-tb", str(threads)]
        if draft is not None:
            argv += ["-td", str(threads), "-tbd", str(threads)]
    return argv


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
    if not profile.port:
        profile.port = preset.port
    if not profile.readiness_path:
        profile.readiness_path = preset.readiness_path
    if not profile.metrics_path:
        profile.metrics_path = preset.metrics_path
    if not profile.launch_argv and preset.argv_template:
        profile.launch_argv = list(preset.argv_template)
