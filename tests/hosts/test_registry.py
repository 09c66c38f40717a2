from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from hosts import presets
from hosts.models import Container, ContainerKind, Host, HostKind, ServerProfile


def _profile(host: Host, **overrides: Any) -> ServerProfile:
    fields: dict[str, Any] = {
        "name": "p",
        "host": host,
        "launch_argv": ["python3", "-m", "x"],
        "port": 30000,
    }
    fields.update(overrides)
    return ServerProfile(**fields)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"launch_argv": "python3 -m sglang"}, "launch_argv"),
        ({"launch_argv": ["python3", 5]}, "launch_argv"),
        ({"launch_argv": []}, "launch_argv"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"env": {"GOOD": 1}}, "env"),
        ({"env": {"A B": "x"}}, "env"),
        ({"port": 0}, "port"),
        ({"port": 70000}, "port"),
        ({"gpu_ids": [0, 0]}, "gpu_ids"),
        ({"gpu_ids": [-1]}, "gpu_ids"),
        ({"gpu_ids": "0,1"}, "gpu_ids"),
        ({"readiness_path": "health"}, "readiness_path"),
        ({"tags": "a,b"}, "tags"),
    ],
)
def test_profile_validation_rejects_bad_input(
    local_host: Host, overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as excinfo:
        _profile(local_host, **overrides).full_clean()
    assert field in excinfo.value.message_dict


@pytest.mark.django_db
def test_a_valid_profile_passes(local_host: Host) -> None:
    _profile(local_host, env={"CUDA_HOME": "/usr/local/cuda"}, gpu_ids=[0, 1]).full_clean()


@pytest.mark.django_db
def test_container_must_belong_to_the_profiles_host(local_host: Host) -> None:
    other = Host.objects.create(name="pve", kind=HostKind.SSH, address="pve.lan")
    container = Container.objects.create(host=other, kind=ContainerKind.PCT, ident="129")
    with pytest.raises(ValidationError) as excinfo:
        _profile(local_host, container=container).full_clean()
    assert "container" in excinfo.value.message_dict


@pytest.mark.django_db
@pytest.mark.parametrize(
    "address", ["-oProxyCommand=touch /tmp/x", "host;rm -rf /", "a b", "$(id)"]
)
def test_host_fields_refuse_option_and_shell_injection(address: str) -> None:
    host = Host(name="h", kind=HostKind.SSH, address=address)
    with pytest.raises(ValidationError) as excinfo:
        host.full_clean()
    assert "address" in excinfo.value.message_dict


@pytest.mark.django_db
def test_ssh_host_needs_an_address() -> None:
    with pytest.raises(ValidationError):
        Host(name="h", kind=HostKind.SSH).full_clean()


@pytest.mark.django_db
def test_container_id_refuses_option_injection(local_host: Host) -> None:
    with pytest.raises(ValidationError):
        Container(host=local_host, kind=ContainerKind.PCT, ident="--help").full_clean()


def test_engine_presets_fill_known_defaults() -> None:
    sglang = presets.initial_data("sglang")
    assert sglang["port"] == 30000
    assert sglang["readiness_path"] == "/health"
    assert "--enable-metrics" in sglang["launch_argv"]  # type: ignore[operator]
    vllm = presets.initial_data("vllm")
    assert vllm["port"] == 8100 and "8100" in vllm["launch_argv"]  # type: ignore[operator]


@pytest.mark.django_db
def test_apply_preset_defaults_only_fills_blanks(local_host: Host) -> None:
    profile = ServerProfile(
        name="v", host=local_host, engine="vllm", port=0, readiness_path="", launch_argv=[]
    )
    profile.apply_preset_defaults()
    assert profile.port == 8100
    # The module, which starts the CPU build too (its `vllm serve` script cannot).
    assert profile.launch_argv[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert profile.launch_argv[profile.launch_argv.index("--host") + 1] == "{api_host}"
    kept = ServerProfile(
        name="k", host=local_host, engine="vllm", port=9000, launch_argv=["my-vllm"]
    )
    kept.apply_preset_defaults()
    assert (kept.port, kept.launch_argv) == (9000, ["my-vllm"])


@pytest.mark.django_db
def test_admin_add_form_is_prefilled_from_the_engine_preset(admin_client: Any) -> None:
    response = admin_client.get("/admin/hosts/serverprofile/add/?engine=vllm")
    assert response.status_code == 200
    assert b'value="8100"' in response.content


@pytest.mark.django_db
def test_admin_change_lists_render(admin_client: Any, local_host: Host) -> None:
    for model in ("host", "container", "serverprofile", "serverinstance"):
        assert admin_client.get(f"/admin/hosts/{model}/").status_code == 200
    for model in ("job", "apitoken"):
        assert admin_client.get(f"/admin/core/{model}/").status_code == 200
    for model in ("sweep", "experiment"):
        assert admin_client.get(f"/admin/benchmarks/{model}/").status_code == 200


def test_no_preset_listens_on_the_dashboards_default_port() -> None:
    from specdash.management.commands.serve import Command as Serve

    dashboard_port = Serve().create_parser("manage.py", "serve").get_default("port")
    assert dashboard_port == 8000
    for engine, preset in presets.PRESETS.items():
        assert preset.port != dashboard_port, engine
        assert presets.argv_port(preset.argv_template) in (None, str(preset.port)), engine


@pytest.mark.django_db
def test_a_port_field_that_disagrees_with_the_launch_command_is_refused_naming_both(
    local_host: Host,
) -> None:
    argv = ["python3", "-m", "benchlib.simulator", "--port", "30000"]
    with pytest.raises(ValidationError) as refused:
        _profile(local_host, port=30001, launch_argv=argv).full_clean()
    message = refused.value.message_dict["port"][0]
    assert "30001" in message and "--port 30000" in message
    with pytest.raises(ValidationError, match="--port 30000"):
        _profile(local_host, port=30001, launch_argv=[*argv[:3], "--port=30000"]).full_clean()
    _profile(local_host, port=30000, launch_argv=argv).full_clean()
    _profile(local_host, port=30001, launch_argv=argv[:3]).full_clean()  # no --port: no claim


@pytest.mark.django_db
def test_a_preset_placeholder_is_refused_until_it_is_replaced(local_host: Host) -> None:
    preset = presets.preset_for("llamacpp")
    with pytest.raises(ValidationError) as refused:
        _profile(local_host, port=preset.port, launch_argv=preset.argv_template).full_clean()
    message = refused.value.message_dict["launch_argv"][0]
    assert "MODEL.gguf" in message and "DRAFT.gguf" in message
    replaced = [
        {"MODEL.gguf": "/m/target.gguf", "DRAFT.gguf": "/m/draft.gguf"}.get(a, a)
        for a in preset.argv_template
    ]
    _profile(local_host, port=preset.port, launch_argv=replaced).full_clean()
