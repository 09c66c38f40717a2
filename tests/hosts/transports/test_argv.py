from __future__ import annotations

import shlex

import pytest

from hosts.transports.base import TransportConfigError
from hosts.transports.chain import HopSpec, build_chain
from hosts.transports.containers import ContainerHop
from hosts.transports.local import LocalTransport
from hosts.transports.ssh import SSHTransport

CTL = "/run/sd"
SSH_PREFIX = [
    "ssh",
    "-T",
    "-o", "BatchMode=yes",
    "-o", "ConnectTimeout=5",
    "-o", "ServerAliveInterval=15",
    "-o", "ServerAliveCountMax=3",
    "-o", "StrictHostKeyChecking=yes",
]  # fmt: skip


def mux(transport: SSHTransport) -> list[str]:
    return [
        "-o", "ControlMaster=auto",
        "-o", f"ControlPath={CTL}/{transport.control_name()}",
        "-o", "ControlPersist=10m",
    ]  # fmt: skip


def pve(**kwargs: object) -> SSHTransport:
    return SSHTransport("pve", user="root", port=22, control_dir=CTL, **kwargs)  # type: ignore[arg-type]


def test_local_command_line_is_argv_itself():
    assert LocalTransport().command_line(["echo", "a b"]) == ["echo", "a b"]
    assert LocalTransport().describe() == "local"


def test_ssh_command_line_has_batch_options_multiplexing_and_one_quoted_command():
    transport = pve(known_hosts_file="/etc/kh", identity_file="/k/id")
    line = transport.command_line(["echo", "a b"])
    assert line == [
        *SSH_PREFIX,
        "-o", "UserKnownHostsFile=/etc/kh",
        "-i", "/k/id", "-o", "IdentitiesOnly=yes",
        "-p", "22",
        *mux(transport),
        "root@pve",
        "echo 'a b'",
    ]  # fmt: skip
    assert "-t" not in line
    assert not any("StrictHostKeyChecking=no" in item for item in line)


def test_ssh_accept_new_is_an_explicit_choice_and_jump_uses_dash_j():
    line = SSHTransport(
        "gpu1", host_key_policy="accept-new", jump="admin@bastion:2222", multiplex=False
    ).command_line(["true"])
    assert "StrictHostKeyChecking=accept-new" in line
    assert line[line.index("-J") + 1] == "admin@bastion:2222"
    assert not any(item.startswith("Control") for item in line)
    assert line[-2:] == ["gpu1", "true"]


def test_ssh_escapes_percent_in_paths_given_as_options():
    line = pve(known_hosts_file="/k/100%/hosts").command_line(["true"])
    assert "UserKnownHostsFile=/k/100%%/hosts" in line


def test_pct_hop_puts_argv_after_double_dash_unquoted():
    hop = ContainerHop("pct", "129")
    assert hop.command_line(["echo", "a; b"]) == ["pct", "exec", "129", "--", "echo", "a; b"]
    assert hop.describe() == "pct exec 129"


def test_lxc_attach_hop_with_and_without_clear_env():
    assert ContainerHop("lxc-attach", "129").command_line(["id"]) == [
        "lxc-attach", "-n", "129", "--", "id",
    ]  # fmt: skip
    assert ContainerHop("lxc-attach", "129", clear_env=True).command_line(["id"]) == [
        "lxc-attach", "-n", "129", "--clear-env", "--", "id",
    ]  # fmt: skip


def test_docker_hop_adds_dash_i_only_when_stdin_is_given():
    hop = ContainerHop("docker", "vllm-a")
    assert hop.command_line(["cat"]) == ["docker", "exec", "vllm-a", "cat"]
    assert hop.command_line(["cat"], stdin=True) == ["docker", "exec", "-i", "vllm-a", "cat"]


def test_incus_hop():
    assert ContainerHop("incus", "gpu-box").command_line(["id"]) == [
        "incus", "exec", "gpu-box", "--", "id",
    ]  # fmt: skip


def test_container_hop_uses_the_given_tool_path():
    hop = ContainerHop("pct", "129", tool="/opt/bin/pct")
    assert hop.command_line(["id"])[0] == "/opt/bin/pct"
    assert hop.label() == "pct exec 129"


def test_ssh_then_pct_quotes_the_whole_inner_command_once():
    ssh = pve()
    chain = ContainerHop("pct", "129", inner=ssh)
    argv = ["python3", "-c", "print('hi'); import os", "a b", "$(x)"]
    line = chain.command_line(argv)
    remote = line[-1]
    assert line[:-2] == [*SSH_PREFIX, "-p", "22", *mux(ssh)]
    assert shlex.split(remote) == ["pct", "exec", "129", "--", *argv]
    assert remote == shlex.join(["pct", "exec", "129", "--", *argv])


def test_three_hops_quote_once_per_ssh_hop():
    # ssh to a bastion-less host, into CT 129, then docker inside it
    chain = ContainerHop("docker", "app", inner=ContainerHop("pct", "129", inner=pve()))
    line = chain.command_line(["sh", "-c", "echo $HOME; ls"], stdin=True)
    assert shlex.split(line[-1]) == [
        "pct", "exec", "129", "--", "docker", "exec", "-i", "app", "sh", "-c", "echo $HOME; ls",
    ]  # fmt: skip


def test_describe_names_every_hop_from_here_outwards():
    chain = ContainerHop("docker", "app", inner=ContainerHop("pct", "129", inner=pve()))
    assert chain.describe() == "ssh root@pve:22 → pct exec 129 → docker exec app"
    assert [h.index for h in chain.hops()] == [1, 2, 3]
    assert chain.hops()[1].hop_description() == "pct exec 129 on root@pve"
    assert chain.hop_description() == "docker exec app on CT 129 on root@pve"


def test_command_text_is_copy_pasteable_and_round_trips():
    chain = ContainerHop("pct", "129", inner=pve())
    argv = ["echo", "it's $(here)"]
    text = chain.command_text(argv)
    assert shlex.split(text) == chain.command_line(argv)
    assert shlex.split(shlex.split(text)[-1]) == ["pct", "exec", "129", "--", *argv]


@pytest.mark.parametrize(
    "host",
    ["-oProxyCommand=touch /tmp/x", "-p", "pve host", "pve;id", "", "a@b", "$(id)", "pve\n"],
)
def test_hostnames_that_could_be_options_or_shell_are_refused(host):
    with pytest.raises(TransportConfigError):
        SSHTransport(host)


@pytest.mark.parametrize("user", ["-oProxyCommand=x", "root@pve", "ro ot", "", "a;b"])
def test_bad_user_names_are_refused(user):
    with pytest.raises(TransportConfigError):
        SSHTransport("pve", user=user)


@pytest.mark.parametrize("jump", ["-oProxyCommand=x", "ok,-oProxyCommand=x", "a@-x", "h:port"])
def test_bad_jump_hosts_are_refused(jump):
    with pytest.raises(TransportConfigError):
        SSHTransport("pve", jump=jump)


@pytest.mark.parametrize("port", [0, 70000, -1, True])
def test_bad_ports_are_refused(port):
    with pytest.raises(TransportConfigError):
        SSHTransport("pve", port=port)


def test_paths_that_break_ssh_option_syntax_are_refused():
    with pytest.raises(TransportConfigError):
        SSHTransport("pve", known_hosts_file="/tmp/a b")
    with pytest.raises(TransportConfigError):
        SSHTransport("pve", identity_file="-oProxyCommand=x")
    with pytest.raises(TransportConfigError, match="too long"):
        SSHTransport("pve", control_dir="/tmp/" + "d" * 80)


def test_host_key_checking_cannot_be_turned_off():
    with pytest.raises(TransportConfigError):
        SSHTransport("pve", host_key_policy="no")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "ident"),
    [
        ("pct", "-1"),
        ("pct", "abc"),
        ("pct", "129;id"),
        ("pct", "12"),
        ("docker", "--privileged"),
        ("docker", "-e"),
        ("docker", "a b"),
        ("incus", "$(id)"),
        ("lxc-attach", ""),
    ],
)
def test_container_ids_that_could_be_options_are_refused(kind, ident):
    with pytest.raises(TransportConfigError):
        ContainerHop(kind, ident)


def test_container_tool_path_cannot_be_an_option():
    with pytest.raises(TransportConfigError):
        ContainerHop("pct", "129", tool="--help")


def test_build_chain_from_specs_matches_hand_built_chain():
    chain = build_chain(
        [HopSpec("ssh", "pve", user="root", port=22), HopSpec("pct", "129")], control_dir=CTL
    )
    hand = ContainerHop("pct", "129", inner=pve())
    assert chain.command_line(["id"]) == hand.command_line(["id"])
    assert chain.describe() == "ssh root@pve:22 → pct exec 129"
    assert build_chain([]).describe() == "local"


def test_build_chain_refuses_ssh_settings_on_a_container_hop():
    with pytest.raises(TransportConfigError, match="port"):
        build_chain([HopSpec("pct", "129", port=22)])
    with pytest.raises(TransportConfigError):
        build_chain([HopSpec("ssh", "pve", clear_env=True)])


def test_empty_argv_is_refused():
    with pytest.raises(ValueError):
        ContainerHop("pct", "129", inner=pve()).command_line([])


def test_the_master_socket_name_covers_identity_and_known_hosts_settings():
    names = {
        pve().control_name(),
        pve(identity_file="/k/a").control_name(),
        pve(identity_file="/k/b").control_name(),
        pve(known_hosts_file="/etc/kh").control_name(),
        pve(host_key_policy="accept-new").control_name(),
    }
    assert len(names) == 5
    assert all(len(n) == 40 and int(n, 16) >= 0 for n in names)
    assert pve(identity_file="/k/a").control_name() == pve(identity_file="/k/a").control_name()
