"""Who holds a TCP port, and whether it can be bound."""

from __future__ import annotations

import errno
import os
import socket
import struct
from typing import TypedDict

from hosts.agent.parts.procfs import ProcInfo, list_pids, proc_info, read_stat


class TcpEntry(TypedDict):
    state: str  # the kernel's hex state code ("0A" listening, "06" TIME_WAIT)
    inode: int


class PortState(TypedDict):
    """Whether a port is free, and what holds it when not."""

    port: int
    free: bool
    listening: bool
    in_use: bool
    holders: list[ProcInfo]
    bind_errors: dict[str, str]
    notes: list[str]


def _proc_net_tcp(port: int) -> list[TcpEntry]:
    entries: list[TcpEntry] = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10:
                continue
            local_port = int(cols[1].rsplit(":", 1)[1], 16)
            if local_port == port:
                entries.append({"state": cols[3], "inode": int(cols[9])})
    return entries


def _bound_inactive_inodes(port: int) -> set[int]:
    """Inodes of sockets bound to port but neither listening nor connected (sock_diag).

    /proc/net/tcp does not show them; Linux 6.9+ dumps them as TCP_BOUND_INACTIVE (13).
    Older kernels ignore the state bit and this returns nothing.
    """
    inodes: set[int] = set()
    states = (1 << 13) | (1 << 7)
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            nl = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4)  # NETLINK_SOCK_DIAG
        except (OSError, AttributeError):
            return inodes
        try:
            nl.settimeout(2.0)
            req = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, states) + b"\0" * 48
            hdr = struct.pack("=IHHII", 16 + len(req), 20, 0x301, 1, 0)  # SOCK_DIAG_BY_FAMILY
            nl.send(hdr + req)
            done = False
            while not done:
                data = nl.recv(65536)
                offset = 0
                while offset + 16 <= len(data):
                    length, msg_type = struct.unpack_from("=IH", data, offset)
                    if length < 16 or msg_type in (2, 3):  # NLMSG_ERROR, NLMSG_DONE
                        done = True
                        break
                    body = offset + 16
                    sport = struct.unpack_from("!H", data, body + 4)[0]
                    inode = struct.unpack_from("=I", data, body + 68)[0]
                    if sport == port and inode:
                        inodes.add(inode)
                    offset += (length + 3) & ~3
        except OSError:
            pass
        finally:
            nl.close()
    return inodes


def _socket_owners(inodes: set[int]) -> list[ProcInfo]:
    if not inodes:
        return []
    wanted = {f"socket:[{inode}]" for inode in inodes}
    owners: list[ProcInfo] = []
    for pid in list_pids():
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target in wanted:
                st = read_stat(pid)
                if st is not None:
                    owners.append(proc_info(st))
                break
    return owners


def _try_bind(family: int, addr: str, port: int, reuse: bool) -> int | None:
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1 if reuse else 0)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((addr, port))
    except OSError as exc:
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            return None
        return exc.errno or -1
    finally:
        sock.close()
    return None


_TCP_STATE_NAMES = {
    "01": "ESTABLISHED",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0B": "CLOSING",
}


def port_state(port: int) -> PortState:
    """Whether port is free: nothing listening on it and we can bind it without SO_REUSEADDR."""
    entries = _proc_net_tcp(port)
    listening = any(e["state"] == "0A" for e in entries)
    notes: list[str] = []
    bind_errors: dict[str, str] = {}
    in_use = False
    for family, addr in (
        (socket.AF_INET, "0.0.0.0"),  # noqa: S104 - a test bind, closed at once
        (socket.AF_INET, "127.0.0.1"),
        (socket.AF_INET6, "::"),
    ):
        err = _try_bind(family, addr, port, reuse=False)
        if err is not None:
            bind_errors[addr] = os.strerror(err) if err > 0 else "bind failed"
            in_use = in_use or err == errno.EADDRINUSE
    inodes = {e["inode"] for e in entries if e["inode"] and e["state"] != "06"}
    if in_use or listening:
        inodes |= _bound_inactive_inodes(port)
    holders = _socket_owners(inodes) if (in_use or listening) else []
    free = not listening and not bind_errors
    if in_use and not listening and not holders:
        # Connections no process owns any more (inode 0: TIME_WAIT, or FIN_WAIT2 while a client
        # such as a load generator or a metrics scraper keeps its end of a kept-alive connection
        # open after the server died) block a plain bind, but servers set SO_REUSEADDR and bind
        # anyway: the kernel ends them by itself, nothing is left to stop.
        only_orphans = bool(entries) and all(e["state"] == "06" or not e["inode"] for e in entries)
        any_addr = "0.0.0.0"  # noqa: S104 - a test bind, closed at once
        if only_orphans and _try_bind(socket.AF_INET, any_addr, port, reuse=True) is None:
            states = sorted({_TCP_STATE_NAMES.get(e["state"], e["state"]) for e in entries})
            notes.append(
                f"only connections no process owns ({', '.join(states)}) on the port: "
                "bindable with SO_REUSEADDR"
            )
            bind_errors = {}
            free = True
            in_use = False
        else:
            notes.append("port is bound by a process the scan cannot name")
    return {
        "port": port,
        "free": free,
        "listening": listening,
        "in_use": in_use,
        "holders": holders,
        "bind_errors": bind_errors,
        "notes": notes,
    }


def port_is_listening(port: int) -> bool:
    return any(e["state"] == "0A" for e in _proc_net_tcp(port))
