"""Hosts, containers and profiles: viewers read, staff create and update."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from hosts.models import Container, Host, InstanceState, ServerInstance, ServerProfile
from tests.specdash.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db


def _profile_body(host_id: int, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "vllm eagle",
        "engine": "vllm",
        "host_id": host_id,
        "launch_argv": [sys.executable, "-m", "vllm"],
        "port": 8000,
        "gpu_ids": [0, 1],
        "tags": ["eagle3"],
    }
    body.update(overrides)
    return body


def test_viewer_lists_hosts_and_reads_one(as_viewer: ApiClient, local_host: Host) -> None:
    page = as_viewer.get("/api/v1/hosts").json()
    assert page["count"] == 1 and page["items"][0]["name"] == "local"
    one = as_viewer.get(f"/api/v1/hosts/{local_host.pk}").json()
    assert (one["id"], one["kind"]) == (local_host.pk, "local")


def test_a_missing_host_is_a_404_in_the_error_shape(as_viewer: ApiClient) -> None:
    response = as_viewer.get("/api/v1/hosts/424242")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_staff_creates_an_ssh_host(as_staff: ApiClient) -> None:
    response = as_staff.post(
        "/api/v1/hosts", {"name": "gpu-box", "kind": "ssh", "address": "10.0.0.5"}
    )
    assert response.status_code == 201, response.content
    host = Host.objects.get(name="gpu-box")
    assert (host.kind, host.address, response.json()["id"]) == ("ssh", "10.0.0.5", host.pk)


def test_the_models_validation_applies_to_api_writes(as_staff: ApiClient) -> None:
    no_address = as_staff.post("/api/v1/hosts", {"name": "x", "kind": "ssh"})
    assert no_address.status_code == 422
    assert "address" in error_of(no_address)["fields"]
    injected = as_staff.post(
        "/api/v1/hosts", {"name": "y", "kind": "ssh", "address": "-oProxyCommand=sh"}
    )
    assert injected.status_code == 422
    assert "address" in error_of(injected)["fields"]
    assert not Host.objects.filter(name__in=["x", "y"]).exists()


def test_an_unknown_field_is_refused_not_ignored(as_staff: ApiClient) -> None:
    response = as_staff.post("/api/v1/hosts", {"name": "z", "colour": "red"})
    assert response.status_code == 422
    assert "body.colour" in error_of(response)["fields"]


def test_staff_updates_only_the_fields_sent(as_staff: ApiClient, local_host: Host) -> None:
    response = as_staff.patch(f"/api/v1/hosts/{local_host.pk}", {"notes": "rack 4"})
    assert response.status_code == 200
    local_host.refresh_from_db()
    assert (local_host.notes, local_host.name) == ("rack 4", "local")


def test_an_operator_who_is_not_staff_cannot_change_the_registry(
    as_operator: ApiClient, local_host: Host
) -> None:
    response = as_operator.patch(f"/api/v1/hosts/{local_host.pk}", {"notes": "x"})
    assert response.status_code == 403
    assert error_of(response)["code"] == "permission_denied"
    assert as_operator.post("/api/v1/hosts", {"name": "n"}).status_code == 403


def test_containers_are_created_listed_and_filtered_by_host(
    as_staff: ApiClient, local_host: Host
) -> None:
    other = Host.objects.create(name="other")
    created = as_staff.post(
        "/api/v1/containers", {"host_id": local_host.pk, "kind": "pct", "ident": "129"}
    )
    assert created.status_code == 201, created.content
    Container.objects.create(host=other, kind="docker", ident="sglang")
    page = as_staff.get("/api/v1/containers", host=local_host.pk).json()
    assert [c["ident"] for c in page["items"]] == ["129"]
    cid = created.json()["id"]
    assert as_staff.patch(f"/api/v1/containers/{cid}", {"label": "prod"}).json()["label"] == "prod"
    assert as_staff.get(f"/api/v1/containers/{cid}").json()["host"] == "local"


def test_a_container_on_an_unknown_host_is_a_field_error(as_staff: ApiClient) -> None:
    response = as_staff.post("/api/v1/containers", {"host_id": 999, "ident": "1"})
    assert response.status_code == 422
    assert "host_id" in error_of(response)["fields"]


def test_staff_creates_and_updates_a_profile(as_staff: ApiClient, local_host: Host) -> None:
    response = as_staff.post("/api/v1/profiles", _profile_body(local_host.pk))
    assert response.status_code == 201, response.content
    profile = ServerProfile.objects.get(name="vllm eagle")
    assert profile.gpu_ids == [0, 1] and profile.launch_argv[1:] == ["-m", "vllm"]
    patched = as_staff.patch(f"/api/v1/profiles/{profile.pk}", {"speculative": True})
    assert patched.json()["speculative"] is True


def test_profile_validation_errors_name_their_fields(as_staff: ApiClient, local_host: Host) -> None:
    other = Host.objects.create(name="other")
    container = Container.objects.create(host=other, kind="pct", ident="7")
    response = as_staff.post(
        "/api/v1/profiles",
        _profile_body(local_host.pk, container_id=container.pk, readiness_path="health"),
    )
    assert response.status_code == 422
    fields = error_of(response)["fields"]
    assert set(fields) >= {"container", "readiness_path"}
    # A managed profile needs a launch command (an endpoint profile has none: the model's rule).
    empty_argv = as_staff.post("/api/v1/profiles", _profile_body(local_host.pk, launch_argv=[]))
    assert empty_argv.status_code == 422
    assert "non-empty" in error_of(empty_argv)["fields"]["launch_argv"][0]


def test_profile_env_values_with_secret_names_are_masked(
    as_viewer: ApiClient, make_profile: Any
) -> None:
    profile = make_profile(env={"HF_TOKEN": "hf_secret", "CUDA_VISIBLE_DEVICES": "0"})
    body = as_viewer.get(f"/api/v1/profiles/{profile.pk}").json()
    assert body["env"] == {"HF_TOKEN": "***", "CUDA_VISIBLE_DEVICES": "0"}


def test_profiles_filter_by_tag_exactly(as_viewer: ApiClient, make_profile: Any) -> None:
    make_profile(name="a", tags=["baseline"])
    make_profile(name="b", tags=["eagle3", "base"])
    make_profile(name="c", tags=[])
    names = [p["name"] for p in as_viewer.get("/api/v1/profiles", tag="base").json()["items"]]
    assert names == ["b"]


def test_lists_are_paginated_with_a_next_link(as_viewer: ApiClient, make_profile: Any) -> None:
    for n in range(5):
        make_profile(name=f"p{n}")
    first = as_viewer.get("/api/v1/profiles", limit=2).json()
    assert (first["count"], len(first["items"]), first["offset"]) == (5, 2, 0)
    second = as_viewer.client.get(first["next"], headers=as_viewer.headers).json()
    assert [p["name"] for p in second["items"]] == ["p2", "p3"]
    last = as_viewer.get("/api/v1/profiles", limit=2, offset=4).json()
    assert last["next"] is None and [p["name"] for p in last["items"]] == ["p4"]


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 201}, {"offset": -1}])
def test_bad_pagination_is_a_validation_error(as_viewer: ApiClient, params: dict[str, int]) -> None:
    response = as_viewer.get("/api/v1/profiles", **params)
    assert response.status_code == 422
    assert error_of(response)["code"] == "validation_error"


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("hosts", "identity_file"),
        ("hosts", "notes"),
        ("containers", "label"),
        ("containers", "ident"),
    ],
)
def test_an_explicit_null_is_a_field_error_not_a_server_error(
    as_staff: ApiClient, local_host: Host, kind: str, field: str
) -> None:
    target: Host | Container = local_host
    if kind == "containers":
        # kind "none" needs no ident, so nothing but the null itself is wrong with the body.
        target = Container.objects.create(host=local_host, kind="none", ident="c1", label="one")
    response = as_staff.patch(f"/api/v1/{kind}/{target.pk}", {field: None})
    assert response.status_code == 422, response.content
    assert field in error_of(response)["fields"]
    target.refresh_from_db()
    assert getattr(target, field) == {"label": "one", "ident": "c1"}.get(field, "")


@pytest.mark.parametrize("field", ["identity_file", "known_hosts_file"])
@pytest.mark.parametrize("value", ["-oProxyCommand=sh -c id", "/keys/my key", "/k/'x'"])
def test_ssh_option_paths_are_validated_by_the_model(
    as_staff: ApiClient, local_host: Host, field: str, value: str
) -> None:
    created = as_staff.post(
        "/api/v1/hosts", {"name": "bad", "kind": "ssh", "address": "h", field: value}
    )
    assert created.status_code == 422 and field in error_of(created)["fields"]
    assert not Host.objects.filter(name="bad").exists()
    patched = as_staff.patch(f"/api/v1/hosts/{local_host.pk}", {field: value})
    assert patched.status_code == 422 and field in error_of(patched)["fields"]
    local_host.refresh_from_db()
    assert getattr(local_host, field) == ""


def test_switching_a_profiles_kind_while_an_instance_is_active_is_refused(
    as_staff: ApiClient, local_host: Host
) -> None:
    profile = ServerProfile.objects.create(
        name="busy", host=local_host, launch_argv=[sys.executable, "-m", "x"], port=30000
    )
    instance = ServerInstance.objects.create(
        profile=profile, host=local_host, port=30000, gpu_ids=[], state=InstanceState.STOPPING,
        run_id="sd-test-busy", launch_argv=profile.launch_argv,
    )  # fmt: skip
    switch = {"kind": "endpoint", "base_url": "http://127.0.0.1:30000", "launch_argv": []}
    response = as_staff.patch(f"/api/v1/profiles/{profile.pk}", switch)
    assert response.status_code == 422, response.content
    [message] = error_of(response)["fields"]["kind"]
    assert f"instance #{instance.pk}" in message and "stop it first" in message, message
    profile.refresh_from_db()
    assert profile.kind == "managed"

    ServerInstance.objects.filter(pk=instance.pk).update(state=InstanceState.STOPPED)
    response = as_staff.patch(f"/api/v1/profiles/{profile.pk}", switch)
    assert response.status_code == 200, response.content
    assert response.json()["kind"] == "endpoint"
