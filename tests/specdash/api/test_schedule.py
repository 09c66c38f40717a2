"""GET /experiments/{id}/schedule: the speculation schedule over the API, for any viewer."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from hosts.models import ServerProfile
from tests.benchmarks.experiments.schedule_data import (
    BASELINE,
    EAGLE3,
    VLLM_EAGLE3,
    constructed_experiment,
    vllm_argv,
)
from tests.specdash.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db


def test_a_viewer_reads_the_schedule_and_its_vllm_configuration(
    as_viewer: ApiClient, anonymous: ApiClient,
    make_profile: Callable[..., ServerProfile], tmp_path: Path,
) -> None:  # fmt: skip
    experiment = constructed_experiment(
        make_profile,
        [("base", "vllm", vllm_argv(None), BASELINE),
         ("eagle3", "vllm", vllm_argv(VLLM_EAGLE3), EAGLE3)],
        tmp_path,
    )  # fmt: skip
    url = f"/api/v1/experiments/{experiment.pk}/schedule"
    assert anonymous.get(url).status_code == 401
    response = as_viewer.get(url)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["available"] is True and body["engine"] == "vllm"
    assert [(b["start"], b["end"], b["draft_length"]) for b in body["bands"]] == [
        (1, 8, 3), (9, None, 0),
    ]  # fmt: skip
    assert all(b["gain_low"] > 1.0 for b in body["bands"])
    config = json.loads(shlex.split(body["configs"][0]["value"])[1])
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 8, 3], [9, 256, 0]]
    # The decision the page renders, with where its switches come from (no running-batch
    # readings were recorded for these levels: on C).
    decision = body["decision"]
    assert [(s["start"], s["end"], s["draft_length"]) for s in decision["steps"]] == [
        (1, 8, 3), (9, None, 0),
    ]  # fmt: skip
    assert decision["statements"][-1] == decision["thresholds"]
    assert decision["thresholds"].startswith("Switches placed on C: no running-batch readings")


def test_an_unreadable_draft_length_is_a_200_with_its_message_and_a_missing_one_404(
    as_viewer: ApiClient, make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    experiment = constructed_experiment(
        make_profile,
        [("base", "llamacpp", ["llama-server", "-m", "m.gguf"], BASELINE),
         ("drafted", "llamacpp", ["llama-server", "-m", "m.gguf", "-md", "d.gguf"], EAGLE3)],
        tmp_path,
    )  # fmt: skip
    body = as_viewer.get(f"/api/v1/experiments/{experiment.pk}/schedule").json()
    assert body["available"] is False and body["bands"] == [] and body["configs"] == []
    assert "arm B (drafted)" in body["message"] and "--spec-draft-n-max" in body["message"]
    missing = as_viewer.get(f"/api/v1/experiments/{experiment.pk + 99}/schedule")
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
