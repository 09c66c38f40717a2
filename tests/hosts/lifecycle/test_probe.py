"""The admin's "test connection" action: the agent's probe through the whole chain, shown
to staff (hostname, user, container, GPUs or their absence, engines), or the failing hop."""

from __future__ import annotations

import getpass
import re
import socket
import sys
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from hosts.lifecycle.probe import host_probe, host_probe_many
from hosts.models import Host, HostKind, ServerProfile
from tests.fixtures.ports import free_port
from tests.hosts.lifecycle.conftest import RUNNING_CT, pct_container

pytestmark = pytest.mark.django_db


def run_action(client: Client, model: str, action: str, pks: list[int]) -> Any:
    return client.post(
        reverse(f"admin:hosts_{model}_changelist"),
        {"action": action, "_selected_action": [str(pk) for pk in pks]},
    )


def reports_of(page: str) -> list[str]:
    return page.split('data-testid="probe-report"')[1:]


def test_testing_the_local_host_shows_hostname_user_gpus_and_engines(
    admin_client: Client, sim_host: Host, sim_profile: Any
) -> None:
    sim_profile()  # its interpreter is asked for engine versions too
    response = run_action(admin_client, "host", "test_host_connection", [sim_host.pk])
    assert response.status_code == 200
    [report] = reports_of(response.content.decode())
    assert 'data-testid="probe-ok"' in report
    assert f'data-testid="probe-hostname">{socket.gethostname()}<' in report
    assert f'data-testid="probe-user">{getpass.getuser()} (uid' in report
    gpus = re.findall(r"GPU \d: NVIDIA RTX PRO 6000", report)
    assert len(gpus) == 4  # the simulator's stand-in, on the host's path_prepend
    assert f"<code>{sys.executable}</code>: sglang not installed" in report


def test_a_host_without_nvidia_smi_shows_no_gpus_and_why(
    admin_client: Client, local_host: Host
) -> None:
    report = host_probe(host=local_host)
    assert report.ok and report.gpus == []
    assert report.gpu_error == "nvidia-smi not found on PATH"
    page = run_action(admin_client, "host", "test_host_connection", [local_host.pk])
    assert "none: nvidia-smi not found on PATH" in page.content.decode()


@pytest.mark.sshd
def test_testing_an_ssh_host_runs_through_ssh(
    admin_client: Client, sshd: Any, ssh_host: Any
) -> None:
    host = ssh_host(sshd)
    report = host_probe(host=host)
    assert report.ok, report.error
    assert report.chain == f"ssh {sshd.user}@127.0.0.1:{sshd.port}"
    assert report.facts is not None
    assert report.facts["hostname"] == socket.gethostname()
    assert report.facts["user"] == sshd.user
    assert len(report.gpus) == 4
    page = run_action(admin_client, "host", "test_host_connection", [host.pk]).content.decode()
    assert f"<code>ssh {sshd.user}@127.0.0.1:{sshd.port}</code>" in page
    assert 'data-testid="probe-ok"' in page


@pytest.mark.sshd
def test_testing_containers_shows_each_result_and_names_the_failing_hop(
    admin_client: Client, pve_sshd: Any, ssh_host: Any
) -> None:
    host = ssh_host(pve_sshd)
    running = pct_container(host, RUNNING_CT)
    missing = pct_container(host, "130")
    response = run_action(
        admin_client, "container", "test_container_connection", [running.pk, missing.pk]
    )
    assert response.status_code == 200
    by_target = {r.split(":", 1)[0]: r for r in reports_of(response.content.decode())}
    ok = next(r for t, r in by_target.items() if t.endswith(f"pct exec {RUNNING_CT}"))
    failed = next(r for t, r in by_target.items() if t.endswith("pct exec 130"))
    assert 'data-testid="probe-ok"' in ok
    assert f"ssh {pve_sshd.user}@127.0.0.1:{pve_sshd.port} → pct exec {RUNNING_CT}" in ok
    assert 'data-testid="probe-failed"' in failed
    assert f'data-testid="probe-hop">hop 2: pct exec 130 on {pve_sshd.user}@127.0.0.1<' in failed
    assert "container 130 does not exist" in failed


def test_an_unreachable_host_fails_naming_hop_1(ssh_control: Any) -> None:
    closed_port = free_port()  # nothing listens there, and no server of this run gets it
    host = Host.objects.create(
        name="closed", kind=HostKind.SSH, address="127.0.0.1", ssh_port=closed_port
    )
    report = host_probe(host=host)
    assert not report.ok
    assert report.hop_index == 1
    assert "connection refused" in report.error


def test_only_staff_can_test_a_connection(operator: Any, local_host: Host) -> None:
    client = Client()
    client.force_login(operator)
    response = run_action(client, "host", "test_host_connection", [local_host.pk])
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_a_stored_value_the_transport_refuses_fails_only_its_own_report(
    admin_client: Client, local_host: Host, tmp_path: Any
) -> None:
    marker = tmp_path / "ran"
    bad = Host.objects.create(name="bad", kind=HostKind.SSH, address="127.0.0.1")
    # As a row written before the model validated the field (update() skips full_clean).
    Host.objects.filter(pk=bad.pk).update(identity_file=f"-oProxyCommand=touch {marker}")
    response = run_action(admin_client, "host", "test_host_connection", [bad.pk, local_host.pk])
    assert response.status_code == 200
    page = response.content.decode()
    bad_report, good_report = reports_of(page)  # ordered by name: "bad" < "local"
    assert "cannot build the connection: unusable identity path" in bad_report
    assert 'data-testid="probe-ok"' in good_report
    assert not marker.exists()


@pytest.mark.sshd
def test_each_ssh_failure_class_gets_its_own_hint(sshd: Any, ssh_host: Any, tmp_path: Any) -> None:
    unknown = tmp_path / "known_hosts"
    unknown.write_text("")
    cases = {
        "host_key": (ssh_host(sshd, known_hosts_file=str(unknown)), str(unknown)),
        "auth": (ssh_host(sshd, ssh_user="nosuchuser"), "user nosuchuser"),
        "key_file": (ssh_host(sshd, identity_file=str(tmp_path / "gone")), str(tmp_path / "gone")),
        "unreachable": (ssh_host(sshd, ssh_port=free_port()), "Nothing answered SSH"),
    }
    reports = host_probe_many(targets=[(host, None) for host, _ in cases.values()])
    for (failure, (_, named)), report in zip(cases.items(), reports, strict=True):
        assert not report.ok
        assert report.failure == failure, (failure, report.error, report.stderr_tail)
        assert named in report.hint, report.hint
    assert len({r.hint for r in reports}) == 4
    # A reachable host has no failure and no hint.
    fine = host_probe(host=ssh_host(sshd))
    assert fine.ok and (fine.failure, fine.hint) == ("", "")


@pytest.mark.sshd
def test_the_overview_offers_test_connection_and_shows_the_hint(
    admin_client: Client, sshd: Any, ssh_host: Any
) -> None:
    host = ssh_host(sshd, ssh_user="nosuchuser")
    overview = admin_client.get("/").content.decode()
    assert f'data-testid="test-connection-{host.name}"' in overview
    url = reverse("hosts:host-test", args=[host.pk])
    assert f'hx-post="{url}"' in overview
    page = admin_client.post(url).content.decode()
    assert 'data-testid="probe-failed"' in page and 'data-failure="auth"' in page
    assert "refused the login of user nosuchuser" in page
    # The Servers page lists the hosts its profiles are on, each with the same button.
    ServerProfile.objects.create(
        name="on ssh", host=host, launch_argv=["python3", "-m", "x"], port=free_port()
    )
    servers = admin_client.get(reverse("hosts:server-list")).content.decode()
    assert f'data-testid="test-connection-{host.name}"' in servers


def test_testing_from_the_pages_needs_the_right_to_change_hosts(
    operator: Any, local_host: Host
) -> None:
    client = Client()
    client.force_login(operator)
    url = reverse("hosts:host-test", args=[local_host.pk])
    assert url not in client.get("/").content.decode()
    assert client.post(url).status_code == 403
