"""The dashboard's ssh master connections (ControlPersist: they outlive the ssh that starts
them, in a session of their own) are closed when the dashboard exits; a master another
process started in the same control directory is left running."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from hosts.transports.ssh import master_pid
from tests.fixtures.dashboard import serving
from tests.fixtures.ports import free_port
from tests.fixtures.procs import alive
from tests.fixtures.sshd import SshServer

pytestmark = pytest.mark.sshd

ROOT = Path(settings.BASE_DIR)
PASSWORD = "ssh-exit-pass-123"


@pytest.fixture
def var_dir() -> Iterator[Path]:
    # Short: the control sockets' paths must fit a unix socket address.
    path = Path(tempfile.mkdtemp(prefix="sdm-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
        capture_output=True, text=True, timeout=100,  # under the test's 120 s
    ).stdout  # fmt: skip


def _ssh_processes_using(directory: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if str(directory).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return [pid for pid in found if alive(pid)]


def _other_master(sshd: SshServer, control: Path) -> int:
    """A master started by this test process, not by the dashboard, in the same directory."""
    subprocess.run(
        ["ssh", "-i", str(sshd.identity_file), "-p", str(sshd.port), "-o", "BatchMode=yes",
         "-o", f"UserKnownHostsFile={sshd.known_hosts_file}", "-o", "StrictHostKeyChecking=yes",
         "-o", "ControlMaster=auto", "-o", f"ControlPath={control}/other", "-o",
         "ControlPersist=120", f"{sshd.user}@{sshd.host}", "true"],
        check=True, capture_output=True, timeout=30, start_new_session=True,
    )  # fmt: skip
    pid = master_pid(control / "other")
    assert pid is not None
    return pid


def test_no_ssh_master_of_the_dashboard_outlives_it(sshd: SshServer, var_dir: Path) -> None:
    env = {**os.environ, "SPECDASH_VAR_DIR": str(var_dir), "SPECDASH_RUN_ROOT": str(var_dir / "r"),
           "SPECDASH_ENGINE_CACHE": str(var_dir / "e"), "SPECDASH_DEMO_PASSWORD": PASSWORD,
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    env.pop("DJANGO_SETTINGS_MODULE", None)
    _manage(env, "migrate", "--no-input", "-v", "0")
    _manage(env, "seed_demo")
    host_pk = _manage(
        env, "shell", "-c",
        "from hosts.models import Host; print(Host.objects.create(name='loop', kind='ssh', "
        f"address='{sshd.host}', ssh_port={sshd.port}, ssh_user='{sshd.user}', "
        f"identity_file='{sshd.identity_file}', known_hosts_file='{sshd.known_hosts_file}').pk)",
    ).split()[-1]  # fmt: skip
    control = var_dir / "ssh-control"
    port = free_port()
    other: int | None = None
    try:
        with serving(env=env, port=port, log_path=var_dir / "serve.log") as url:
            with httpx.Client(base_url=url, timeout=30) as client:
                login = client.get("/accounts/login/")
                token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text)
                assert token
                client.post(
                    "/accounts/login/",
                    data={"username": "operator", "password": PASSWORD,
                          "csrfmiddlewaretoken": token.group(1)},
                    headers={"Referer": f"{url}/accounts/login/"},
                )  # fmt: skip
                probe = client.post(
                    f"/servers/hosts/{host_pk}/test/",
                    headers={"X-CSRFToken": client.cookies["csrftoken"], "Referer": url + "/"},
                )
            assert 'data-testid="probe-ok"' in probe.text, probe.text
            masters = [p for s in control.iterdir() if (p := master_pid(s)) is not None]
            assert masters, "the test connection left no master to close"
            other = _other_master(sshd, control)
        # The block ended: the dashboard got SIGTERM and has exited.
        for pid in masters:
            assert not alive(pid), pid
        assert _ssh_processes_using(control) == [other]
        assert master_pid(control / "other") == other
    finally:
        if other is not None and alive(other):
            os.kill(other, signal.SIGTERM)
