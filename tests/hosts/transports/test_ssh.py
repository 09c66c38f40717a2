from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hosts.transports.base import CommandFailed, CommandTimeout, HopError
from hosts.transports.chain import HopSpec, build_chain
from hosts.transports.containers import ContainerHop
from hosts.transports.local import LocalTransport
from hosts.transports.script import run_script
from hosts.transports.ssh import SSHTransport
from tests.fixtures.ports import free_port
from tests.fixtures.sshd import SshServer
from tests.hosts.transports.conftest import ECHO_ARGV, NASTY_ARGS, PCT

pytestmark = pytest.mark.sshd

TIMEOUT = 60.0


def free_closed_port() -> int:
    # Nothing listens on it and no server of this run is given it; unlike a port the kernel
    # picks, it is never an outgoing connection's local port (ssh could connect to itself).
    return free_port()


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def recorded_in(known_hosts: Path, port: int) -> bool:
    # The entry may be hashed (HashKnownHosts): ask ssh-keygen whom it is for.
    lookup = ["ssh-keygen", "-F", f"[127.0.0.1]:{port}", "-f", str(known_hosts)]
    return subprocess.run(lookup, capture_output=True, check=False).returncode == 0


@pytest.fixture
def pwned_marker() -> Iterator[Path]:
    marker = Path(f"/tmp/PWNED-{secrets.token_hex(6)}")
    yield marker
    marker.unlink(missing_ok=True)


@pytest.fixture
def stranger_key(tmp_path: Path) -> Path:
    return keygen(tmp_path / "stranger")


@pytest.fixture
def wrong_known_hosts(sshd: SshServer, tmp_path: Path) -> Path:
    other = keygen(tmp_path / "other_host_key")
    key_type, key = Path(f"{other}.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts_wrong"
    known.write_text(f"[127.0.0.1]:{sshd.port} {key_type} {key}\n")
    return known


@pytest.fixture
def empty_known_hosts(tmp_path: Path) -> Path:
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    return empty


async def test_ssh_runs_a_command(make_ssh):
    result = await make_ssh().run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=TIMEOUT)
    assert (result.returncode, result.stdout, result.stderr) == (3, b"out\n", b"err\n")


async def test_ssh_sends_stdin(make_ssh):
    data = bytes(range(256)) * 512
    result = await make_ssh().run(["cat"], timeout=TIMEOUT, stdin=data)
    assert result.stdout == data


async def test_ssh_streams_lines_and_stops_the_command_on_exit(make_ssh):
    argv = [
        "sh",
        "-c",
        "for i in 1 2 3; do echo line $i; done; while :; do echo more; sleep 0.2; done",
    ]
    got = []
    async with make_ssh().stream(argv) as lines:
        async for line in lines:
            got.append(line)
            if len(got) == 3:
                break
    assert got == ["line 1", "line 2", "line 3"]


async def test_ssh_stream_that_ends_reports_the_exit_status(make_ssh):
    async with make_ssh().stream(["sh", "-c", "echo a; echo b; exit 2"]) as lines:
        assert [line async for line in lines] == ["a", "b"]
    assert lines.returncode == 2


async def test_ssh_timeout_kills_the_local_ssh_and_says_where(make_ssh):
    transport = make_ssh()
    with pytest.raises(CommandTimeout) as info:
        await transport.run(["sleep", "31"], timeout=2)
    assert str(info.value).startswith(transport.describe())
    assert "killed ssh" in str(info.value)


async def test_awkward_arguments_arrive_byte_for_byte_over_ssh(make_ssh):
    result = await make_ssh().run([*ECHO_ARGV, *NASTY_ARGS], timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr_text
    assert json.loads(result.stdout) == NASTY_ARGS


async def test_awkward_arguments_arrive_byte_for_byte_through_ssh_and_pct(make_ssh):
    chain = ContainerHop("pct", "129", tool=PCT, inner=make_ssh())
    result = await chain.run([*ECHO_ARGV, *NASTY_ARGS], timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr_text
    assert json.loads(result.stdout) == NASTY_ARGS


async def test_ssh_pct_docker_chain_keeps_arguments_intact(make_ssh):
    from tests.hosts.transports.conftest import DOCKER

    chain = ContainerHop(
        "docker", "129", tool=DOCKER, inner=ContainerHop("pct", "129", tool=PCT, inner=make_ssh())
    )
    result = await chain.run([*ECHO_ARGV, *NASTY_ARGS], timeout=TIMEOUT)
    assert json.loads(result.stdout) == NASTY_ARGS
    assert (await chain.run(["cat"], timeout=TIMEOUT, stdin=b"in")).stdout == b"in"


async def test_shell_text_in_one_argument_never_runs_on_the_host(make_ssh, pwned_marker):
    marker = pwned_marker
    payload = f"echo ok; touch {marker}"
    chain = ContainerHop("pct", "129", tool=PCT, inner=make_ssh())
    result = await chain.run(["echo", payload], timeout=TIMEOUT)
    assert result.stdout_text == payload + "\n"
    result = await chain.run(["sh", "-c", "printf '%s' \"$1\"", "sh", payload], timeout=TIMEOUT)
    assert result.stdout_text == payload
    assert not await asyncio.to_thread(os.path.exists, marker)


async def test_the_naive_join_this_guards_against_does_run_on_the_host(make_ssh, pwned_marker):
    # The Ansible bug: "pct exec 129 -- " + command joined unquoted. Shown here so that the
    # test above is known to be able to fail.
    naive = [
        *make_ssh().command_line(["true"])[:-1],
        f"{PCT} exec 129 -- echo ok; touch {pwned_marker}",
    ]
    await LocalTransport().run(naive, timeout=TIMEOUT)
    assert await asyncio.to_thread(os.path.exists, pwned_marker)


async def test_second_command_reuses_the_master_connection(make_ssh, control_dir):
    transport = make_ssh()
    first = await transport.run(["true"], timeout=TIMEOUT)
    assert await transport.control("check")
    sockets = list(control_dir.iterdir())
    assert len(sockets) == 1 and sockets[0].is_socket()
    later = [(await transport.run(["true"], timeout=TIMEOUT)).duration for _ in range(3)]
    assert list(control_dir.iterdir()) == sockets  # the same master, no new connection
    # Reported, not asserted: timing on a loaded CI machine is not a test.
    print(f"first {first.duration * 1000:.0f} ms, then {[round(d * 1000) for d in later]} ms")
    await transport.close()
    assert not await transport.control("check")


async def test_without_multiplexing_there_is_no_master(make_ssh, control_dir):
    transport = make_ssh(multiplex=False)
    assert (await transport.run(["true"], timeout=TIMEOUT)).ok
    assert list(control_dir.iterdir()) == []


async def test_control_dir_open_to_others_is_refused(make_ssh, control_dir):
    control_dir.chmod(0o755)
    with pytest.raises(Exception, match="reachable by others"):
        await make_ssh().run(["true"], timeout=TIMEOUT)


async def test_wrong_host_key_fails_hop_1_with_host_key_verification(
    sshd: SshServer, make_ssh, wrong_known_hosts
):
    with pytest.raises(HopError) as info:
        await make_ssh(known_hosts_file=wrong_known_hosts).run(["true"], timeout=TIMEOUT)
    assert info.value.hop_index == 1
    assert "host key verification failed" in str(info.value)
    assert str(info.value).startswith(f"hop 1 (ssh {sshd.user}@127.0.0.1:{sshd.port}): ")


async def test_unknown_host_key_fails_under_strict_checking(make_ssh, empty_known_hosts):
    with pytest.raises(HopError, match="host key verification failed"):
        await make_ssh(known_hosts_file=empty_known_hosts).run(["true"], timeout=TIMEOUT)


async def test_accept_new_with_empty_known_hosts_works_and_records_the_key(
    sshd: SshServer, make_ssh, empty_known_hosts
):
    transport = make_ssh(known_hosts_file=empty_known_hosts, host_key_policy="accept-new")
    assert (await transport.run(["true"], timeout=TIMEOUT)).ok
    assert recorded_in(empty_known_hosts, sshd.port)


async def test_ssh_to_a_closed_port_is_hop_1_connection_refused(make_ssh):
    with pytest.raises(HopError) as info:
        await make_ssh(port=free_closed_port()).run(["true"], timeout=TIMEOUT)
    assert info.value.hop_index == 1
    assert info.value.message == "connection refused"
    assert info.value.returncode == 255


async def test_unknown_client_key_is_permission_denied_publickey(make_ssh, stranger_key):
    with pytest.raises(HopError, match=r"hop 1 .*: permission denied \(publickey\)"):
        await make_ssh(identity_file=stranger_key).run(["true"], timeout=TIMEOUT)


async def test_a_remote_command_exiting_255_is_not_an_ssh_failure(make_ssh):
    result = await make_ssh().run(["sh", "-c", "exit 255"], timeout=TIMEOUT)
    assert result.returncode == 255


# run_script over ssh: hop failure versus command failure


async def test_run_script_through_ssh_and_pct(make_ssh):
    chain = ContainerHop("pct", "129", tool=PCT, inner=make_ssh())
    script = 'echo "args: $#"\nprintf \'SPECDASH-RESULT {"first": "%s"}\\n\' "$1"\n'
    result = await run_script(chain, script, ["sh", "-s", "--"], ["it's"], timeout=TIMEOUT)
    assert result.value == {"first": "it's"}
    assert result.output == ["args: 1"]


async def test_run_script_python_through_ssh_and_pct(make_ssh):
    chain = ContainerHop("pct", "129", tool=PCT, inner=make_ssh())
    script = "import json, sys\nprint('SPECDASH-RESULT ' + json.dumps(sys.argv[1:]))\n"
    result = await run_script(chain, script, [sys.executable, "-"], NASTY_ARGS, timeout=TIMEOUT)
    assert result.value == NASTY_ARGS


async def test_run_script_into_a_missing_container_is_hop_2(make_ssh, sshd: SshServer):
    chain = ContainerHop("pct", "130", tool=PCT, inner=make_ssh())
    with pytest.raises(HopError) as info:
        await run_script(chain, "echo 'SPECDASH-RESULT null'\n", timeout=TIMEOUT)
    assert info.value.hop_index == 2
    assert str(info.value) == (
        f"hop 2 (pct exec 130 on {sshd.user}@127.0.0.1): "
        "container 130 does not exist (on this node)"
    )


async def test_run_script_exiting_1_is_a_command_failure_not_a_hop_error(make_ssh):
    chain = ContainerHop("pct", "129", tool=PCT, inner=make_ssh())
    with pytest.raises(CommandFailed) as info:
        await run_script(chain, "echo 'Connection refused' >&2\nexit 1\n", timeout=TIMEOUT)
    assert info.value.returncode == 1
    assert not isinstance(info.value, HopError)


async def test_run_script_exiting_255_with_ssh_like_stderr_is_still_a_command_failure(make_ssh):
    with pytest.raises(CommandFailed, match="status 255"):
        await run_script(
            make_ssh(), "echo 'ssh: Connection refused' >&2\nexit 255\n", timeout=TIMEOUT
        )


async def test_run_script_to_a_closed_port_is_hop_1(make_ssh):
    chain = ContainerHop("pct", "129", tool=PCT, inner=make_ssh(port=free_closed_port()))
    with pytest.raises(HopError) as info:
        await run_script(chain, "echo 'SPECDASH-RESULT 1'\n", timeout=TIMEOUT)
    assert info.value.hop_index == 1
    assert "connection refused" in str(info.value)


async def test_run_script_timeout_kills_ssh(make_ssh):
    chain = ContainerHop("pct", "129", tool=PCT, inner=make_ssh())
    with pytest.raises(CommandTimeout) as info:
        await run_script(chain, "sleep 45\n", timeout=10)
    assert info.value.entered is True


async def test_chain_built_from_specs_runs(sshd: SshServer, control_dir):
    chain = build_chain(
        [
            HopSpec(
                "ssh",
                sshd.host,
                user=sshd.user,
                port=sshd.port,
                identity_file=str(sshd.identity_file),
                known_hosts_file=str(sshd.known_hosts_file),
            ),
            HopSpec("pct", "129", tool=PCT),
        ],
        control_dir=control_dir,
    )
    try:
        assert (await chain.run(["echo", "hi"], timeout=TIMEOUT)).stdout == b"hi\n"
        assert chain.describe() == f"ssh {sshd.user}@127.0.0.1:{sshd.port} → pct exec 129"
    finally:
        ssh = chain.hops()[0]
        assert isinstance(ssh, SSHTransport)
        await ssh.close()


async def test_stream_to_a_closed_port_raises_hop_1_when_it_ends(make_ssh):
    with pytest.raises(HopError, match=r"^hop 1 .*connection refused"):
        async with make_ssh(port=free_closed_port()).stream(["echo", "hi"]) as lines:
            _ = [line async for line in lines]


async def test_pct_missing_on_the_host_is_hop_2_not_found(make_ssh, sshd: SshServer):
    chain = ContainerHop("pct", "129", tool="/nonexistent/pct", inner=make_ssh())
    with pytest.raises(HopError) as info:
        await run_script(chain, "echo 'SPECDASH-RESULT 1'\n", timeout=TIMEOUT)
    assert info.value.hop_index == 2
    assert info.value.message == f"/nonexistent/pct not found on {sshd.user}@127.0.0.1"


async def test_entries_differing_only_in_known_hosts_do_not_share_a_master(
    make_ssh, control_dir, wrong_known_hosts
):
    trusted = make_ssh()
    assert (await trusted.run(["true"], timeout=TIMEOUT)).ok
    assert await trusted.control("check")
    # Same destination, but a known_hosts without this server's key: its own check must
    # run, not be skipped by riding on the first entry's live master connection.
    with pytest.raises(HopError, match="host key verification failed"):
        await make_ssh(known_hosts_file=wrong_known_hosts).run(["true"], timeout=TIMEOUT)
    assert len(list(control_dir.iterdir())) == 1
    await trusted.close()
