"""Secrets in a launch argv or an environment are masked on every surface a viewer reads
(pages, API, exports, the comparison report), and an edit that sends the mask back keeps the
stored secret."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from benchmarks.experiments import selectors as exp_selectors
from benchmarks.experiments import services as experiment_services
from benchmarks.experiments.models import Experiment, ExperimentState
from benchmarks.sweeps.environment import sweep_environment
from benchmarks.sweeps.models import Sweep, SweepLevel
from hosts import services as host_services
from hosts.models import Host, InstanceState, ServerInstance, ServerProfile
from tests.specdash.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db

SECRETS = ("k1-secret", "k2-secret", "pw-secret", "dsn-secret", "proxy-secret", "hf-secret")
ARGV = [
    "python3", "-m", "benchlib.simulator", "--api-key", "k1-secret", "--admin-api-key=k2-secret",
    "--model", "https://user:proxy-secret@hub.example/m", "--port", "30000",
]  # fmt: skip
ENV = {
    "DB_PASS": "pw-secret",
    "SENTRY_DSN": "dsn-secret",
    "HTTPS_PROXY": "http://u:proxy-secret@proxy:3128",
    "CUDA_VISIBLE_DEVICES": "0",
}


def _no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, secret


@pytest.fixture
def profile(make_profile: Callable[..., ServerProfile]) -> ServerProfile:
    return make_profile(name="Secretive", launch_argv=ARGV, env=ENV)


@pytest.fixture
def instance(profile: ServerProfile, make_instance: Callable[..., ServerInstance]) -> Any:
    instance = make_instance(profile, launch_argv=ARGV, env=ENV)
    host_services.instance_transition(
        instance_id=instance.pk,
        state=InstanceState.READY,
        message="Launched detached: env HF_TOKEN=hf-secret python3 --api-key k1-secret",
    )
    return instance


def test_the_profile_api_masks_argv_and_env_by_flag_name_and_shape(
    as_viewer: ApiClient, profile: ServerProfile
) -> None:
    body = as_viewer.get(f"/api/v1/profiles/{profile.pk}").json()
    _no_secret(str(body))
    assert body["launch_argv"][3:8] == [
        "--api-key", "***", "--admin-api-key=***", "--model", "https://user:***@hub.example/m"
    ]  # fmt: skip
    assert body["env"] == {
        "DB_PASS": "***", "SENTRY_DSN": "***", "HTTPS_PROXY": "http://u:***@proxy:3128",
        "CUDA_VISIBLE_DEVICES": "0",
    }  # fmt: skip


def test_patching_back_what_was_read_keeps_the_stored_secrets(
    as_staff: ApiClient, profile: ServerProfile
) -> None:
    body = as_staff.get(f"/api/v1/profiles/{profile.pk}").json()
    argv = [*body["launch_argv"][:-1], "30001"]
    env = {**body["env"], "CUDA_VISIBLE_DEVICES": "1"}
    # The port moves with its field: a launch command's --port must agree with it.
    response = as_staff.patch(
        f"/api/v1/profiles/{profile.pk}", {"launch_argv": argv, "env": env, "port": 30001}
    )
    assert response.status_code == 200, response.content
    profile.refresh_from_db()
    assert profile.launch_argv == [*ARGV[:-1], "30001"]
    assert profile.env == {**ENV, "CUDA_VISIBLE_DEVICES": "1"}
    # A mask with no stored secret behind it is refused, not saved.
    refused = as_staff.patch(f"/api/v1/profiles/{profile.pk}", {"env": {"NEW_TOKEN": "***"}})
    assert refused.status_code == 422 and "env" in error_of(refused)["fields"]
    profile.refresh_from_db()
    assert "NEW_TOKEN" not in profile.env


def test_patching_a_host_environment_back_keeps_its_secret(
    as_staff: ApiClient, local_host: Host
) -> None:
    Host.objects.filter(pk=local_host.pk).update(command_env={"MYSQL_PWD": "pw-secret"})
    body = as_staff.get(f"/api/v1/hosts/{local_host.pk}").json()
    assert body["command_env"] == {"MYSQL_PWD": "***"}
    response = as_staff.patch(
        f"/api/v1/hosts/{local_host.pk}", {"command_env": body["command_env"]}
    )
    assert response.status_code == 200, response.content
    local_host.refresh_from_db()
    assert local_host.command_env == {"MYSQL_PWD": "pw-secret"}


def test_the_instance_page_and_its_events_hide_the_secrets(
    client: Client, viewer: User, as_viewer: ApiClient, instance: ServerInstance
) -> None:
    client.force_login(viewer)
    page = client.get(f"/servers/instances/{instance.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    _no_secret(html)
    assert "--api-key ***" in html and "HF_TOKEN=***" in html
    events = as_viewer.get(f"/api/v1/instances/{instance.pk}/events").json()
    _no_secret(str(events))
    # What a start waited on quotes the server's answer (here a model URL with a password).
    ServerInstance.objects.filter(pk=instance.pk).update(
        readiness="models 'https://user:proxy-secret@hub.example/m' not in []"
    )
    body = as_viewer.get(f"/api/v1/instances/{instance.pk}").json()
    _no_secret(str(body))
    assert body["readiness"] == "models 'https://user:***@hub.example/m' not in []"


def test_the_servers_log_is_masked_on_the_page_and_in_the_api(
    client: Client, viewer: User, as_viewer: ApiClient, instance: ServerInstance
) -> None:
    """SGLang logs its ServerArgs with the key in them; a server may also print a dict, JSON
    or a bearer header. The figures beside them (token counts) stay readable."""
    log = "\n".join([
        "server_args=ServerArgs(model_path='/m', api_key='k1-secret', admin_api_key=None, "
        "max_total_tokens=4096, speculative_num_draft_tokens=4)",
        "non-default args: {'model': '/m', 'hf_token': 'hf-secret', 'max_num_seqs': 8}",
        '{"api_key": "k2-secret", "num_speculative_tokens": 3}',
        "GET /v1/models Authorization: Bearer pw-secret",
    ])  # fmt: skip
    ServerInstance.objects.filter(pk=instance.pk).update(log_tail=log)
    client.force_login(viewer)
    html = client.get(f"/servers/instances/{instance.pk}/").content.decode()
    _no_secret(html)
    body = as_viewer.get(f"/api/v1/instances/{instance.pk}/log").json()
    assert body["lines"] == [
        "server_args=ServerArgs(model_path='/m', api_key='***', admin_api_key=None, "
        "max_total_tokens=4096, speculative_num_draft_tokens=4)",
        "non-default args: {'model': '/m', 'hf_token': '***', 'max_num_seqs': 8}",
        '{"api_key": "***", "num_speculative_tokens": 3}',
        "GET /v1/models Authorization: Bearer ***",
    ]  # fmt: skip
    assert "api_key=&#x27;***&#x27;, admin_api_key=None, max_total_tokens=4096" in html
    assert as_viewer.get(f"/api/v1/instances/{instance.pk}/log?lines=1").json()["lines"] == [
        "GET /v1/models Authorization: Bearer ***"
    ]


def test_a_halted_experiment_shows_its_dirty_servers_evidence_and_reasons_masked(
    client: Client, viewer: User, as_viewer: ApiClient, profile: ServerProfile,
    make_profile: Callable[..., ServerProfile],
) -> None:  # fmt: skip
    """A dirty stop halts an experiment with the server's evidence: the holders' command lines,
    another process's --api-key among them. The instance page masks them; so must the
    experiment's page, its socket rows and the API."""
    other = make_profile(name="Other", launch_argv=["python3", "-m", "benchlib.simulator"])
    experiment = experiment_services.experiment_create(
        profiles=[profile, other], levels=[1], load={"requests_per_level": 4, "max_tokens": 8}
    )
    holder = {"pid": 7, "comm": "python3", "cmdline": ["vllm", "serve", "--api-key", "k1-secret"]}
    Experiment.objects.filter(pk=experiment.pk).update(
        state=ExperimentState.HALTED,
        reason="server #1 ended dirty: launched with env HF_TOKEN=hf-secret",
        evidence={"instance_id": 1, "state": "dirty", "holders": [holder]},
    )
    experiment.steps.filter(index=0).update(reason="start failed: --api-key k2-secret")
    client.force_login(viewer)
    html = client.get(f"/experiments/{experiment.pk}/").content.decode()
    _no_secret(html)
    assert "&#x27;--api-key&#x27;, &#x27;***&#x27;" in html and "HF_TOKEN=***" in html
    body = as_viewer.get(f"/api/v1/experiments/{experiment.pk}").json()
    _no_secret(str(body))
    assert body["reason"] == "server #1 ended dirty: launched with env HF_TOKEN=***"
    assert body["steps"][0]["reason"] == "start failed: --api-key ***"
    snapshot = exp_selectors.experiment_snapshot(experiment_id=experiment.pk)
    assert snapshot is not None
    _no_secret(str(snapshot))
    assert snapshot["steps"][0]["reason"] == "start failed: --api-key ***"


def test_a_sweep_snapshot_masks_the_argv_and_old_snapshots_are_masked_on_the_way_out(
    client: Client, viewer: User, as_viewer: ApiClient, instance: ServerInstance
) -> None:
    fresh = sweep_environment(instance=instance, base_url="http://x", model="m")
    _no_secret(str(fresh))
    # A snapshot taken before the argv was masked, as stored rows hold it.
    old = {"instance": {"launch_argv": ARGV, "env": ENV, "server_info": {"api_key": "k1-secret"}}}
    sweeps = []
    for _ in range(2):
        sweep = Sweep.objects.create(
            instance=instance, profile=instance.profile, levels=[1], state="completed",
            environment=old,
        )  # fmt: skip
        SweepLevel.objects.create(sweep=sweep, index=0, concurrency=1, state="completed",
                                  output_tok_s=10.0, summary={"output_tok_s": 10.0})  # fmt: skip
        sweeps.append(sweep.pk)
    a, b = sweeps
    _no_secret(str(as_viewer.get(f"/api/v1/sweeps/{a}").json()))
    _no_secret(as_viewer.get(f"/api/v1/sweeps/{a}/levels.json").content.decode())
    client.force_login(viewer)
    _no_secret(client.get(f"/sweeps/{a}/levels.json").content.decode())
    comparison = client.get(f"/compare/?sweeps={a}&sweeps={b}")
    assert comparison.status_code == 200
    html = comparison.content.decode()
    assert "--api-key ***" in html
    _no_secret(html)
    report = client.get(f"/compare/report.html?sweeps={a}&sweeps={b}")
    assert report.status_code == 200
    _no_secret(report.content.decode())
