"""`make run` (seed_demo) on a machine where `make engines` built llama-server."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from hosts.models import Engine, ServerProfile

pytestmark = [pytest.mark.llamacpp, pytest.mark.django_db]


def test_seed_demo_offers_a_llamacpp_baseline_and_draft_pair_beside_the_simulated_one(
    llama_server_bin: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(settings, "VAR_DIR", tmp_path)
    call_command("seed_demo")
    call_command("seed_demo")  # idempotent
    llama = {p.name: p for p in ServerProfile.objects.filter(engine=Engine.LLAMACPP)}
    assert sorted(llama) == ["llama.cpp baseline (tiny, CPU)", "llama.cpp draft-simple (tiny, CPU)"]
    assert ServerProfile.objects.filter(engine=Engine.SIMULATOR).count() == 2
    base, draft = (
        llama["llama.cpp baseline (tiny, CPU)"],
        llama["llama.cpp draft-simple (tiny, CPU)"],
    )
    assert base.launch_argv[0] == str(llama_server_bin) == draft.launch_argv[0]
    assert "-md" not in base.launch_argv and not base.speculative
    assert draft.speculative
    spec = draft.launch_argv[draft.launch_argv.index("--spec-type") + 1]
    assert (
        spec == "draft-simple"
        and Path(draft.launch_argv[draft.launch_argv.index("-md") + 1]).is_file()
    )
    assert "--metrics" in draft.launch_argv and draft.metrics_path == "/metrics"


def test_a_failed_first_model_write_leaves_no_models_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from engines import models

    def fail(path: Path, *args: object, **kwargs: object) -> None:
        path.write_bytes(b"half a header")
        raise OSError("disk full")

    monkeypatch.setattr(models, "write_model", fail)
    with pytest.raises(OSError, match="disk full"):
        models.write_pair(tmp_path / "models")
    assert not (tmp_path / "models").exists()
