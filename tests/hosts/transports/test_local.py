from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hosts.transports.base import CommandFailed, CommandTimeout, HopError
from hosts.transports.containers import ContainerHop
from hosts.transports.local import LocalTransport
from hosts.transports.script import PYTHON, SH, diagnose, run_script
from tests.fixtures.procs import alive
from tests.hosts.transports.conftest import DOCKER, ECHO_ARGV, INCUS, LXC_ATTACH, NASTY_ARGS, PCT

TIMEOUT = 30.0


def pct(ident: str = "129", **kwargs) -> ContainerHop:
    return ContainerHop("pct", ident, tool=PCT, **kwargs)


async def wait_dead(pid: int, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_local_run_returns_output_status_and_duration():
    result = await LocalTransport().run(
        ["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=TIMEOUT
    )
    assert (result.returncode, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    assert result.duration > 0
    assert not result.ok


async def test_local_run_sends_stdin_bytes():
    data = bytes(range(256)) * 1000
    result = await LocalTransport().run(["cat"], timeout=TIMEOUT, stdin=data)
    assert result.stdout == data


async def test_local_run_without_stdin_gives_the_command_an_empty_one():
    result = await LocalTransport().run(["cat"], timeout=TIMEOUT)
    assert result.stdout == b""


async def test_local_env_adds_variables():
    result = await LocalTransport(env={"SPECDASH_X": "1"}).run(
        ["sh", "-c", "echo $SPECDASH_X"], timeout=TIMEOUT
    )
    assert result.stdout == b"1\n"


async def test_missing_executable_reads_like_a_shell_127():
    result = await LocalTransport().run(["specdash-no-such-tool"], timeout=TIMEOUT)
    assert result.returncode == 127
    assert b"specdash-no-such-tool: command not found" in result.stderr


async def test_timeout_kills_the_process_and_its_children(tmp_path):
    pidfile = tmp_path / "child"
    script = f"sleep 300 & echo $! > {pidfile}; echo started; wait"
    started = time.monotonic()
    with pytest.raises(CommandTimeout) as info:
        await LocalTransport().run(["sh", "-c", script], timeout=5)
    assert time.monotonic() - started < 60  # killed, not waited for
    assert info.value.stdout == b"started\n"
    assert await wait_dead(int(pidfile.read_text()))
    assert "no answer within 5s" in str(info.value)


async def test_cancellation_kills_the_process(tmp_path):
    pidfile = tmp_path / "pid"
    task = asyncio.create_task(
        LocalTransport().run(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 300"], timeout=300)
    )
    for _ in range(400):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_dead(int(pidfile.read_text()))


async def test_a_daemon_holding_the_pipes_does_not_hold_up_the_call():
    started = time.monotonic()
    result = await LocalTransport().run(["sh", "-c", "sleep 120 & echo $!"], timeout=300)
    os.kill(int(result.stdout), signal.SIGKILL)  # the daemon we left behind
    assert time.monotonic() - started < 60  # the call did not wait for the daemon


async def test_stream_yields_lines_and_the_exit_status():
    transport = LocalTransport()
    async with transport.stream(["sh", "-c", "for i in 1 2 3; do echo line $i; done"]) as lines:
        got = [line async for line in lines]
    assert got == ["line 1", "line 2", "line 3"]
    assert lines.returncode == 0


async def test_leaving_a_stream_early_kills_the_command(tmp_path):
    pidfile = tmp_path / "pid"
    argv = ["sh", "-c", f"echo $$ > {pidfile}; while true; do echo tick; sleep 0.1; done"]
    async with LocalTransport().stream(argv) as lines:
        async for line in lines:
            assert line == "tick"
            break
    assert await wait_dead(int(pidfile.read_text()))


async def test_stream_terminate_ends_the_iteration():
    async with LocalTransport().stream(["sh", "-c", "echo one; exec sleep 300"]) as lines:
        got = []
        async for line in lines:
            got.append(line)
            lines.terminate()
    assert got == ["one"]
    assert lines.returncode not in (None, 0)


async def test_stream_sends_stdin():
    async with LocalTransport().stream(["cat"], stdin=b"a\nb\n") as lines:
        assert [line async for line in lines] == ["a", "b"]


@pytest.mark.parametrize(
    "hop",
    [
        lambda: ContainerHop("pct", "129", tool=PCT),
        lambda: ContainerHop("lxc-attach", "129", tool=LXC_ATTACH),
        lambda: ContainerHop("lxc-attach", "129", tool=LXC_ATTACH, clear_env=True),
        lambda: ContainerHop("docker", "129", tool=DOCKER),
        lambda: ContainerHop("incus", "129", tool=INCUS),
        lambda: ContainerHop("docker", "129", tool=DOCKER, inner=pct()),
    ],
    ids=["pct", "lxc-attach", "lxc-attach-clear-env", "docker", "incus", "pct-docker"],
)
async def test_awkward_arguments_arrive_byte_for_byte_as_one_item_each(hop):
    result = await hop().run([*ECHO_ARGV, *NASTY_ARGS], timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr_text
    assert json.loads(result.stdout) == NASTY_ARGS


async def test_docker_hop_delivers_stdin_with_dash_i():
    hop = ContainerHop("docker", "129", tool=DOCKER)
    assert (await hop.run(["cat"], timeout=TIMEOUT, stdin=b"hello")).stdout == b"hello"


async def test_lxc_attach_clear_env_starts_from_a_clean_environment():
    transport = ContainerHop(
        "lxc-attach", "129", tool=LXC_ATTACH, clear_env=True,
        inner=LocalTransport(env={"SPECDASH_LEAK": "yes"}),
    )  # fmt: skip
    result = await transport.run(["env"], timeout=TIMEOUT)
    assert "SPECDASH_LEAK" not in result.stdout_text
    assert "container=lxc" in result.stdout_text


@pytest.mark.parametrize(
    ("kind", "tool", "message"),
    [
        ("pct", PCT, "container 130 does not exist"),
        ("lxc-attach", LXC_ATTACH, "container 130 is not running"),
        ("docker", DOCKER, "container 130 does not exist"),
        ("incus", INCUS, "container 130 does not exist"),
    ],
)
async def test_missing_container_is_a_hop_error_in_operator_terms(kind, tool, message):
    with pytest.raises(HopError) as info:
        await ContainerHop(kind, "130", tool=tool).run(["true"], timeout=TIMEOUT)
    assert info.value.hop_index == 1
    assert message in str(info.value)
    assert str(info.value).startswith(f"hop 1 ({kind}")


async def test_stopped_container_is_reported_as_not_running():
    transport = pct("131", inner=LocalTransport(env={"SPECDASH_FAKE_STOPPED_CTS": "131"}))
    with pytest.raises(HopError, match="container 131 is not running"):
        await transport.run(["true"], timeout=TIMEOUT)


async def test_missing_container_tool_is_a_hop_error():
    with pytest.raises(HopError, match="specdash-no-pct not found on this machine"):
        await ContainerHop("pct", "129", tool="specdash-no-pct").run(["true"], timeout=TIMEOUT)


async def test_command_failing_inside_the_container_is_not_a_hop_error():
    result = await pct().run(["sh", "-c", "echo oops >&2; exit 1"], timeout=TIMEOUT)
    assert result.returncode == 1


async def drain(transport, argv) -> list[str]:
    async with transport.stream(argv) as lines:
        return [line async for line in lines]


async def test_stream_reports_a_hop_failure_when_it_ends():
    with pytest.raises(HopError, match=r"hop 2 .*container 130 does not exist"):
        await drain(ContainerHop("pct", "130", tool=PCT, inner=pct()), ["true"])


def test_nothing_but_the_stand_in_runs_the_command_no_shell(tmp_path):
    # `pct exec 129 -- 'echo a; touch x'` must look for a program of that name
    marker = tmp_path / "PWNED"
    proc = subprocess.run(
        [PCT, "exec", "129", "--", f"echo a; touch {marker}"], capture_output=True, check=False
    )
    assert proc.returncode == 127
    assert not marker.exists()


# run_script: hop failure versus command failure


async def test_run_script_returns_the_result_line():
    script = 'echo working\necho "$1" "$2" >&2\necho \'SPECDASH-RESULT {"n": 2}\'\n'
    result = await run_script(pct(), script, SH, ["a b", "$(c)"], timeout=TIMEOUT)
    assert result.ok
    assert result.value == {"n": 2}
    assert result.output == ["working"]
    assert "a b $(c)" in result.stderr


async def test_run_script_python_with_future_import_and_args():
    script = (
        "from __future__ import annotations\n"
        "import json, sys\n"
        "print('SPECDASH-RESULT ' + json.dumps(sys.argv[1:]))\n"
    )
    interpreter = [sys.executable, "-"]
    result = await run_script(pct(), script, interpreter, NASTY_ARGS, timeout=TIMEOUT)
    assert result.value == NASTY_ARGS
    assert PYTHON == ("python3", "-")


async def test_run_script_that_exits_1_is_a_command_failure_not_a_hop_error():
    with pytest.raises(CommandFailed) as info:
        await run_script(pct(), "echo broken >&2\nexit 1\n", timeout=TIMEOUT)
    assert info.value.returncode == 1
    assert "exited with status 1" in str(info.value)
    assert "broken" in str(info.value)
    assert not isinstance(info.value, HopError)


async def test_run_script_failure_without_check_returns_ok_false():
    result = await run_script(pct(), "exit 4\n", timeout=TIMEOUT, check=False)
    assert (result.ok, result.returncode) == (False, 4)


async def test_run_script_without_result_line_is_a_command_failure():
    with pytest.raises(CommandFailed, match="without a SPECDASH-RESULT line"):
        await run_script(pct(), "echo hello\n", timeout=TIMEOUT)
    result = await run_script(pct(), "echo hello\n", timeout=TIMEOUT, expect_result=False)
    assert result.ok and result.output == ["hello"]


async def test_run_script_into_a_missing_container_names_that_hop():
    chain = ContainerHop("docker", "app", tool=DOCKER, inner=pct("130"))
    with pytest.raises(HopError) as info:
        await run_script(chain, "echo 'SPECDASH-RESULT 1'\n", timeout=TIMEOUT)
    assert info.value.hop_index == 1
    assert "container 130 does not exist" in info.value.message


async def test_run_script_names_the_innermost_hop_that_cannot_be_entered():
    chain = ContainerHop("docker", "nope", tool=DOCKER, inner=pct())
    with pytest.raises(HopError) as info:
        await run_script(chain, "echo 'SPECDASH-RESULT 1'\n", timeout=TIMEOUT)
    assert info.value.hop_index == 2
    assert str(info.value) == "hop 2 (docker exec nope on CT 129): container nope does not exist"


async def test_run_script_whose_interpreter_is_missing_is_a_command_failure():
    with pytest.raises(CommandFailed, match="exited with status 127"):
        await run_script(pct(), "true\n", ["specdash-no-interpreter", "-"], timeout=TIMEOUT)


async def test_run_script_timeout_says_the_script_had_started():
    with pytest.raises(CommandTimeout) as info:
        await run_script(pct(), "sleep 300\n", timeout=5)
    assert info.value.entered is True
    assert "pct exec 129" in str(info.value)


async def test_diagnose_finds_nothing_wrong_with_a_working_chain():
    assert await diagnose(ContainerHop("docker", "129", tool=DOCKER, inner=pct())) is None


def _pidns_works() -> bool:
    probe = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=20, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _pidns_works(), reason="unshare --pid --mount-proc is not allowed here")
async def test_pct_stand_in_can_run_the_command_in_its_own_pid_namespace():
    transport = pct(inner=LocalTransport(env={"SPECDASH_FAKE_PCT_PIDNS": "1"}))
    result = await transport.run(
        ["sh", "-c", "echo $$; ls /proc | grep -c '^[0-9]'"], timeout=TIMEOUT
    )
    pid, visible = result.stdout_text.split()
    assert pid == "1"
    assert int(visible) < 10  # only the namespace's own processes
    assert os.getpid() != 1


def test_start_sshd_fails_loudly_when_openssh_server_is_missing(monkeypatch, tmp_path):
    from tests.fixtures import sshd as fixture

    monkeypatch.setattr(fixture, "SSHD", str(tmp_path / "no-sshd"))
    with pytest.raises(fixture.SshdUnavailable, match=r"\.ci/run"):
        fixture.start_sshd(tmp_path / "work")
