from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hosts.transports.ssh import SSHTransport
from tests.fixtures.sshd import SshServer, sshd  # noqa: F401 - one server for the whole run

BIN = Path(__file__).resolve().parents[2] / "fixtures" / "bin"
PCT = str(BIN / "pct")
LXC_ATTACH = str(BIN / "lxc-attach")
DOCKER = str(BIN / "docker")
INCUS = str(BIN / "incus")

# Far end of every quoting test: prints its argv as JSON (ASCII-escaped, so the bytes
# survive any locale on the way back).
ECHO_ARGV = [sys.executable, "-c", "import sys, json; print(json.dumps(sys.argv[1:]))"]

NASTY_ARGS = [
    ";",
    "echo a; echo b",
    "|",
    "a | b",
    "&&",
    "true && false",
    "$(id -u)",
    "`id -u`",
    "'",
    '"',
    "it's",
    'say "hi"',
    "'\"'\"'",
    "line one\nline two",
    "trailing newline\n",
    "with  two  spaces",
    " ",
    "",
    "tab\there",
    "ünïcødé ✓ 日本",
    "*",
    "?",
    "[a-z]*",
    "~",
    "~root",
    "$HOME",
    "${PATH}",
    "\\",
    "back\\slash",
    "#not a comment",
    "!",
    "-oProxyCommand=touch /tmp/x",
    "--",
    "-c",
    "%C %h",
    "a=b",
    ">out",
    "<in",
    "2>&1",
    "{a,b}",
]


@pytest.fixture
def control_dir() -> Iterator[Path]:
    # Short, private and per test: a Unix socket path must stay under 108 bytes, and a
    # master left by one test must not answer for another (it would skip host-key checks).
    path = Path(tempfile.mkdtemp(prefix="sdc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def make_ssh(
    sshd: SshServer,  # noqa: F811
    control_dir: Path,
) -> AsyncIterator[Callable[..., SSHTransport]]:
    """Build SSHTransports to the test sshd; their master connections close at teardown."""
    made: list[SSHTransport] = []

    def make(**overrides: Any) -> SSHTransport:
        options: dict[str, Any] = {
            "user": sshd.user,
            "port": sshd.port,
            "identity_file": sshd.identity_file,
            "known_hosts_file": sshd.known_hosts_file,
            "control_dir": control_dir,
        }
        options.update(overrides)
        transport = SSHTransport(sshd.host, **options)
        made.append(transport)
        return transport

    yield make
    for transport in made:
        await transport.close()
