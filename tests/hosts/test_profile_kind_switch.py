"""Switching a filled admin profile form's Kind: the save drops the fields the chosen kind does
not use and says which (a notice after the save), instead of refusing the save."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.messages import get_messages

from hosts.models import Host, InstanceState, ProfileKind, ServerInstance, ServerProfile

pytestmark = pytest.mark.django_db

ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/llama", "--port", "30000"]


def _form(**fields: Any) -> dict[str, str]:
    """The admin profile form as a browser posts it: every field, JSON ones as JSON text."""
    data: dict[str, Any] = {
        "name": "p", "kind": "managed", "engine": "sglang", "host": "", "container": "",
        "tags": [], "notes": "", "variant_of": "", "base_url": "", "metrics_url": "",
        "api_kind": "", "launch_argv": [], "env": {}, "workdir": "", "port": "", "gpu_ids": [],
        "stop_grace_s": 30, "readiness_path": "/health", "readiness_status": 200,
        "readiness_timeout_s": 600, "api_host": "", "openai_base_path": "/v1",
        "served_model_name": "", "metrics_path": "/metrics",
    }  # fmt: skip
    data.update(fields)
    return {k: json.dumps(v) if isinstance(v, list | dict) else str(v) for k, v in data.items()}


def _warnings(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request) if m.level_tag == "warning"]


def test_choosing_endpoint_on_a_filled_add_form_saves_it_without_the_launch_fields(
    admin_client: Any, local_host: Host
) -> None:
    # The add form opens on SGLang's preset, filled further; then Kind is switched to Endpoint.
    data = _form(
        name="outside", kind="endpoint", host=local_host.pk, base_url="http://10.0.0.5:30001",
        launch_argv=ARGV, env={"HF_HOME": "/cache"}, workdir="/srv", port=30000, gpu_ids=[0, 1],
    )  # fmt: skip
    response = admin_client.post("/admin/hosts/serverprofile/add/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    profile = ServerProfile.objects.get(name="outside")
    assert profile.kind == ProfileKind.ENDPOINT and profile.host == local_host
    assert (profile.launch_argv, profile.env, profile.workdir, profile.gpu_ids) == ([], {}, "", [])
    assert profile.port == 30001  # the base URL's, not the launch fields'
    [notice] = _warnings(response)
    assert notice.startswith("Saved as an endpoint profile: cleared ")
    for label in ("Launch argv", "Env", "Workdir", "GPU ids"):
        assert label.lower() in notice.lower(), notice
    assert "never starts an endpoint" in notice


def test_switching_an_endpoint_to_managed_drops_its_url_fields_with_a_notice(
    admin_client: Any, local_host: Host
) -> None:
    endpoint = ServerProfile(
        name="was outside", kind="endpoint", engine="sglang", base_url="http://10.0.0.5:30000",
        metrics_url="http://10.0.0.5:30000/metrics", api_kind="chat",
    )  # fmt: skip
    endpoint.full_clean()
    endpoint.save()
    data = _form(name="was outside", host=local_host.pk, launch_argv=ARGV, port=30000,
                 base_url=endpoint.base_url, metrics_url=endpoint.metrics_url, api_kind="chat")  # fmt: skip
    response = admin_client.post(f"/admin/hosts/serverprofile/{endpoint.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    endpoint.refresh_from_db()
    assert endpoint.kind == ProfileKind.MANAGED and endpoint.launch_argv == ARGV
    assert (endpoint.base_url, endpoint.metrics_url, endpoint.api_kind) == ("", "", "")
    [notice] = _warnings(response)
    assert notice.startswith("Saved as a managed profile: cleared ")
    assert "base url" in notice.lower() and "metrics url" in notice.lower(), notice


def test_a_save_that_drops_nothing_gives_no_notice(admin_client: Any, local_host: Host) -> None:
    data = _form(name="plain", host=local_host.pk, launch_argv=ARGV, port=30000, gpu_ids=[0])
    response = admin_client.post("/admin/hosts/serverprofile/add/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert ServerProfile.objects.get(name="plain").gpu_ids == [0]
    assert _warnings(response) == []


def test_an_endpoint_form_with_a_bad_url_is_still_refused_on_that_field(
    admin_client: Any,
) -> None:
    data = _form(name="bad", kind="endpoint", base_url="not a url", launch_argv=ARGV)
    response = admin_client.post("/admin/hosts/serverprofile/add/", data)
    assert response.status_code == 200  # the form again, with the error on base URL only
    errors = response.context["adminform"].form.errors
    assert set(errors) == {"base_url"}, errors
    assert not ServerProfile.objects.filter(name="bad").exists()


def _instance_of(profile: ServerProfile, state: InstanceState) -> ServerInstance:
    assert profile.host is not None
    return ServerInstance.objects.create(
        profile=profile, host=profile.host, port=30000, gpu_ids=[], state=state,
        run_id=f"sd-test-{state}", launch_argv=profile.launch_argv,
    )  # fmt: skip


def test_switching_the_kind_of_a_profile_with_a_ready_instance_is_refused_naming_it(
    admin_client: Any, local_host: Host
) -> None:
    managed = ServerProfile.objects.create(
        name="busy", host=local_host, launch_argv=ARGV, port=30000
    )
    ready = _instance_of(managed, InstanceState.READY)
    data = _form(name="busy", kind="endpoint", host=local_host.pk,
                 base_url="http://127.0.0.1:30000", launch_argv=ARGV, port=30000)  # fmt: skip
    response = admin_client.post(f"/admin/hosts/serverprofile/{managed.pk}/change/", data)
    assert response.status_code == 200  # the form again, the error on Kind
    errors = response.context["adminform"].form.errors
    assert set(errors) == {"kind"}, errors
    [message] = errors["kind"]
    assert f"instance #{ready.pk}" in message and "stop it first" in message, message
    managed.refresh_from_db()
    assert managed.kind == ProfileKind.MANAGED and managed.launch_argv == ARGV

    # Stopped (or failed) instances do not hold it: the same switch then saves.
    ServerInstance.objects.filter(pk=ready.pk).update(state=InstanceState.STOPPED)
    _instance_of(managed, InstanceState.FAILED)
    response = admin_client.post(f"/admin/hosts/serverprofile/{managed.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    managed.refresh_from_db()
    assert managed.kind == ProfileKind.ENDPOINT


def test_an_edit_that_keeps_the_kind_is_not_held_up_by_a_running_instance(
    admin_client: Any, local_host: Host
) -> None:
    managed = ServerProfile.objects.create(
        name="busy", host=local_host, launch_argv=ARGV, port=30000
    )
    _instance_of(managed, InstanceState.LOADING)
    data = _form(name="busy", host=local_host.pk, launch_argv=ARGV, port=30000, notes="rack 4")
    response = admin_client.post(f"/admin/hosts/serverprofile/{managed.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    managed.refresh_from_db()
    assert managed.notes == "rack 4"
