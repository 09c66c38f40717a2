from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from types import FrameType

from .config import SimConfig
from .gpu import Holding

log = logging.getLogger("specdash.sim")


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _worker_main(config: SimConfig, rank: int, parent_fd: int, memory: dict[int, int]) -> int:
    # Ctrl-C reaches the whole process group; only the parent decides how to shut down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if config.fault_ignore_sigterm else _stop)
    if config.fault_setsid_workers:
        os.setsid()
    import setproctitle  # only workers need it

    setproctitle.setproctitle(config.title_for(rank))
    parent = os.getppid()
    holding = Holding(config.state_dir, memory, role=f"worker{rank}")
    log.info("TP%d holds %s MiB on GPUs %s", rank, sum(memory.values()), sorted(memory))
    watching = True
    try:
        while True:
            readable, _, _ = select.select([parent_fd] if watching else [], [], [], 0.5)
            # EOF on the pipe (only the parent holds its write end) or re-parenting = parent died.
            gone = (readable and not os.read(parent_fd, 64)) or os.getppid() != parent
            if gone and watching:
                if config.fault_orphan_workers:
                    watching = False
                    parent = os.getppid()
                    log.info("TP%d: parent died; staying alive (orphan fault)", rank)
                else:
                    log.info("TP%d: parent died; exiting", rank)
                    return 0
    finally:
        holding.release()


class Workers:
    """The tensor-parallel stand-ins, forked before the server binds anything else."""

    def __init__(
        self, config: SimConfig, memory: list[dict[int, int]], close_fds: list[int]
    ) -> None:
        self.config = config
        self.pids: list[int] = []
        self.exited: dict[int, int] = {}
        read_fd, self._write_fd = os.pipe()
        for rank in range(config.workers):
            pid = os.fork()
            if pid == 0:  # child
                code = 1
                try:
                    os.close(self._write_fd)
                    for fd in close_fds:
                        os.close(fd)
                    code = _worker_main(config, rank, read_fd, memory[rank])
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 0
                except BaseException:
                    log.exception("TP%d crashed", rank)
                finally:
                    logging.shutdown()
                    os._exit(code)
            self.pids.append(pid)
        os.close(read_fd)

    def alive(self) -> list[int]:
        return [pid for pid in self.pids if pid not in self.exited]

    def reap(self) -> list[tuple[int, int]]:
        """Workers that exited since the last call, as (rank, exit status)."""
        died: list[tuple[int, int]] = []
        for rank, pid in enumerate(self.pids):
            if pid in self.exited:
                continue
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                self.exited[pid] = status
                died.append((rank, os.waitstatus_to_exitcode(status)))
        return died

    def terminate(self) -> None:
        """SIGTERM every worker and wait for all of them (forever, if they ignore it)."""
        for pid in self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        waited = 0.0
        while self.alive():
            self.reap()
            time.sleep(0.02)
            waited += 0.02
            if self.alive() and waited >= 5.0:
                log.warning("Waiting for worker processes %s to exit", self.alive())
                waited = 0.0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._write_fd)
