"""Private run directories, atomic writes, exit codes and log tails."""

from __future__ import annotations

import contextlib
import os
from typing import TypedDict

from hosts.agent.parts.base import AgentError


class LogTail(TypedDict):
    path: str
    exists: bool
    size: int
    lines: list[str]
    truncated: bool  # lines were left out (before the tail, or past max_bytes)


def write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    # O_EXCL|O_NOFOLLOW: never write through a name someone else put there first.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def expand_run_dir(path: str) -> str:
    """``{uid}`` in a run directory is this user's uid: one private run root per user."""
    return path.replace("{uid}", str(os.getuid()))


def _trusted_ancestors(path: str) -> None:
    # Above the run root, every directory must belong to root or to us, and one others may
    # write to must be sticky (as /tmp is): otherwise they could swap the root out.
    uid = os.getuid()
    current = os.path.realpath(path)
    while True:
        st = os.stat(current)
        if st.st_uid not in (0, uid):
            raise AgentError(
                f"unsafe run directory: {current} belongs to uid {st.st_uid}, not to root or"
                f" this user (uid {uid}); set SPECDASH_RUN_ROOT to a private directory"
            )
        if st.st_mode & 0o022 and not st.st_mode & 0o1000:
            raise AgentError(
                f"unsafe run directory: {current} is writable by others and not sticky;"
                " set SPECDASH_RUN_ROOT to a private directory"
            )
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


def private_dir(path: str) -> None:
    """Create ``path`` 0700, or accept an existing one only if it is a real directory (not a
    symlink) owned by this user that nobody else can write to; refuse anything else."""
    import stat

    uid = os.getuid()
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise AgentError(f"unsafe run directory: {path} is a symlink; remove it or choose another")
    if not stat.S_ISDIR(st.st_mode):
        raise AgentError(f"unsafe run directory: {path} is not a directory")
    if st.st_uid != uid:
        raise AgentError(
            f"unsafe run directory: {path} belongs to uid {st.st_uid}, not this user"
            f" (uid {uid}); another user may have created it: remove it or set"
            " SPECDASH_RUN_ROOT to a private directory"
        )
    if st.st_mode & 0o022:
        raise AgentError(
            f"unsafe run directory: {path} is writable by group or others (mode"
            f" {stat.S_IMODE(st.st_mode):o}); remove it or make it 0700"
        )
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)  # ours and unwritable by others: safe to tighten


def private_run_dir(run_dir: str) -> None:
    """The run root (``run_dir``'s parent) and ``run_dir`` itself, both private."""
    root = os.path.dirname(run_dir.rstrip("/"))
    _trusted_ancestors(os.path.dirname(root))
    private_dir(root)
    private_dir(run_dir)


def read_exit_code(run_dir: str | None) -> int | None:
    if not run_dir:
        return None
    try:
        with open(os.path.join(run_dir, "exit_code")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def log_tail(path: str, lines: int, max_bytes: int) -> LogTail:
    lines = max(0, min(lines, 10000))
    max_bytes = max(1, min(max_bytes, 1 << 20))
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError:
        return {"path": path, "exists": False, "size": 0, "lines": [], "truncated": False}
    truncated = size > max_bytes
    text = data.decode("utf-8", "replace").splitlines()
    if truncated and text:
        text = text[1:]  # the first line is probably cut
    out = text[-lines:] if lines else []
    return {
        "path": path,
        "exists": True,
        "size": size,
        "lines": out,
        "truncated": truncated or len(text) > len(out),
    }
