from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
import time
from types import FrameType
from typing import Any, cast

from .app import SimApp
from .config import SimConfig
from .gpu import Gpu, Holding, live_entries, load_inventory, split_memory
from .workers import Workers

log = logging.getLogger("specdash.sim")


class _Terminated(Exception):
    pass


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.getLogger("daphne").setLevel(logging.WARNING)


def _oom_exit(gpu: int, total_mib: int, free_mib: int, asked_mib: int) -> int:
    print(
        "Traceback (most recent call last):\n"
        '  File "sglang/srt/managers/scheduler.py", line 2904, in run_scheduler_process\n'
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)\n"
        '  File "sglang/srt/model_executor/model_runner.py", line 712, in init_memory_pool\n'
        "    self.token_to_kv_pool = MHATokenToKVPool(...)\n"
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        f"{asked_mib / 1024:.2f} GiB. GPU {gpu} has a total capacity of {total_mib / 1024:.2f} GiB "
        f"of which {free_mib / 1024:.2f} GiB is free.",
        file=sys.stderr,
        flush=True,
    )
    log.error("Rank 0 scheduler is dead. Please check if there are relevant logs.")
    return 1


def _check_memory(config: SimConfig, inventory: list[Gpu], per_gpu_mib: int) -> int | None:
    by_index = {g.index: g for g in inventory}
    for index in config.gpus:
        if index not in by_index:
            print(
                f"RuntimeError: CUDA error: invalid device ordinal (GPU {index})", file=sys.stderr
            )
            return 1
    used: dict[int, int] = {}
    for entry in live_entries(config.state_dir):
        for index, mib in entry.memory_mib.items():
            used[index] = used.get(index, 0) + mib
    for index in config.gpus:
        gpu = by_index[index]
        free = gpu.total_mib - used.get(index, 0)
        if config.fail_oom_at_start or per_gpu_mib > free:
            return _oom_exit(index, gpu.total_mib, max(0, free), per_gpu_mib)
    return None


def _bind(config: SimConfig) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host, config.port))
    return sock


def utilization(running: int, max_running: int) -> int:
    return 0 if running == 0 else min(100, 70 + round(30 * running / max_running))


class Engine:
    """The main process: socket, workers, GPU holding, ASGI app and its HTTP server (Daphne,
    or the lean one of `lean.py` with `--http lean`)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.workers: Workers | None = None
        self.holding: Holding | None = None
        self.app: SimApp | None = None
        self._last_log = time.monotonic()
        self._tasks: set[asyncio.Task[None]] = set()

    def run(self) -> int:
        config = self.config
        log.info("server_args=%s", config)
        inventory = load_inventory(config.state_dir)
        per_gpu_mib = int(config.gpu_memory_gb * 1024)
        failed = _check_memory(config, inventory, per_gpu_mib)
        if failed is not None:
            return failed
        try:
            sock = _bind(config)
        except OSError as exc:
            log.error(
                "ERROR: [Errno %s] error while attempting to bind on address %s:%s: %s",
                exc.errno,
                config.host,
                config.port,
                exc.strerror,
            )
            return 1
        host, port = sock.getsockname()[:2]
        self.config = config = _with_port(config, port)
        log.info("HTTP server bound to http://%s:%s (pid %d)", host, port, os.getpid())
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            memory = split_memory(config.gpus, config.workers, per_gpu_mib)
            if config.workers:
                self.workers = Workers(config, memory, close_fds=[sock.fileno()])
            self.holding = Holding(config.state_dir, {} if config.workers else memory[0], "main")
            log.info("Load weight begin. GPUs=%s, %d MiB per GPU", list(config.gpus), per_gpu_mib)
            self.app = SimApp(config, on_crash=self._crash_soon)
            if config.load_mode == "no-listen" and config.load_seconds > 0:
                time.sleep(config.load_seconds)
                self._loaded()
            elif config.load_seconds > 0:
                self.app.ready = False
            sock.listen(1024)
            signal.signal(signal.SIGTERM, previous)
            return self._serve(sock)
        except (_Terminated, KeyboardInterrupt):
            log.info("Terminated during start-up")
            return 0
        finally:
            self._shutdown()

    def _loaded(self) -> None:
        profile = self.config.profile
        log.info(
            "Load weight end. max_total_num_tokens=%d, max_running_requests=%d, context_len=%d",
            profile.kv_tokens,
            profile.max_running,
            self.config.max_model_len,
        )

    def _serve(self, sock: socket.socket) -> int:
        if self.config.http == "lean":
            return self._serve_lean(sock)
        return self._serve_daphne(sock)

    def _serve_lean(self, sock: socket.socket) -> int:
        from .lean import LeanServer

        async def serve() -> None:
            assert self.app is not None
            server = LeanServer(self.app, asyncio.get_running_loop())
            await server.serve(sock, started=self._started, before_shutdown=self._before_shutdown)

        asyncio.run(serve())
        log.info("Server stopped")
        return 0

    def _serve_daphne(self, sock: socket.socket) -> int:
        from daphne.server import Server
        from twisted.internet import reactor as twisted_reactor

        # Twisted types the reactor as its interfaces, whose methods lack `self`.
        reactor = cast(Any, twisted_reactor)

        assert self.app is not None
        # Twisted adopts (and later closes) the descriptor itself.
        fileno = sock.detach()
        server = Server(
            application=self.app,
            endpoints=[f"fd:fileno={fileno}"],
            signal_handlers=True,
            verbosity=0,
            application_close_timeout=2,
        )
        reactor.addSystemEventTrigger("before", "shutdown", self._before_shutdown)
        reactor.callLater(0, self._started)
        server.run()
        log.info("Server stopped")
        return 0

    def _started(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.add(loop.create_task(self._housekeeping()))
        log.info("Started server process [%d]", os.getpid())
        if self.app is not None and not self.app.ready:
            loop.call_later(self.config.load_seconds, self._ready)
        else:
            self._ready()

    def _ready(self) -> None:
        app = self.app
        if app is not None and not app.ready:
            self._loaded()
            app.ready = True
        if app is not None and not app.warmed:
            # SGLang: a warm-up generation after load; "ready to roll" once it succeeded.
            task = asyncio.get_running_loop().create_task(self._warm_up(app))
            self._tasks.add(task)
            return
        log.info("The server is fired up and ready to roll!")

    async def _warm_up(self, app: SimApp) -> None:
        await app.warm_up()
        log.info("The server is fired up and ready to roll!")

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self._tick()

    def _tick(self) -> None:
        app, config = self.app, self.config
        assert app is not None
        app.tick()
        core = app.core
        if self.holding is not None:
            util = utilization(len(core.running), core.profile.max_running)
            self.holding.utilization = dict.fromkeys(config.gpus, util)
            with contextlib.suppress(OSError):
                self.holding.write()
        if self.workers is not None:
            for rank, code in self.workers.reap():
                log.error("Scheduler TP%d exited with code %d; shutting down", rank, code)
                self._crash("worker died")
        now = time.monotonic()
        if core.running and now - self._last_log >= config.log_interval:
            self._last_log = now
            log.info(
                "Decode batch. #running-req: %d, #token: %d, token usage: %.2f, "
                "gen throughput (token/s): %.2f, #queue-req: %d",
                len(core.running),
                core.kv_used,
                core.kv_used / core.profile.kv_tokens,
                app.metrics.gen_throughput,
                len(core.queue),
            )

    def _before_shutdown(self) -> None:
        log.info(
            "Received shutdown signal; aborting %d requests", len(self.app.live) if self.app else 0
        )
        if self.app is not None:
            self.app.abort_all("server shutdown")

    def _crash_soon(self) -> None:
        # Let the last response's bytes leave the socket first.
        asyncio.get_running_loop().call_later(0.05, self._crash, "crash-after-requests fault")

    def _crash(self, why: str) -> None:
        assert self.app is not None
        log.error(
            "Fatal: %s after %d completed requests; exiting abruptly", why, self.app.completed
        )
        logging.shutdown()
        self.app.truth.close()
        self.app.controller_truth.close()
        os._exit(1)

    def _shutdown(self) -> None:
        if self.app is not None:
            self.app.truth.close()
            self.app.controller_truth.close()
        if self.workers is not None:
            self.workers.terminate()
            self.workers.close()
        if self.holding is not None:
            self.holding.release()


def _with_port(config: SimConfig, port: int) -> SimConfig:
    return dataclasses.replace(config, port=port)


def main(config: SimConfig) -> int:
    configure_logging()
    return Engine(config).run()
