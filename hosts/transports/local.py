from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass

from hosts.transports.base import CommandResult, CommandTimeout, LineStream, Transport

# After the process exits, output already in the pipes is read within this grace; a
# grandchild that kept the pipes open (a daemon it started) does not hold the call up.
DRAIN_GRACE = 2.0
STREAM_LINE_LIMIT = 4 * 1024 * 1024
STREAM_STDERR_KEEP = 64 * 1024
NOT_FOUND_RC = 127


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    # asyncio's Process.wait() also waits for the pipes to close, which a daemon started
    # by the command can keep open for hours: this tells when the process itself exited.
    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


@dataclass
class _Child:
    proc: asyncio.subprocess.Process
    transport: asyncio.SubprocessTransport
    protocol: _Protocol

    async def wait(self) -> int:
        await asyncio.shield(self.protocol.exited)
        returncode = self.transport.get_returncode()
        assert returncode is not None
        return returncode

    def kill_group(self) -> None:
        # The process was started with setsid (start_new_session), so its pid is the group
        # id: this kills it and whatever it spawned locally, and nothing else.
        if self.transport.get_returncode() is None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def release(self) -> None:
        # Close our ends of the pipes now rather than when a leftover daemon closes theirs.
        self.transport.close()


async def _pump(reader: asyncio.StreamReader | None, buf: bytearray, keep: int = 0) -> None:
    if reader is None:
        return
    while chunk := await reader.read(65536):
        buf += chunk
        if keep and len(buf) > keep:
            del buf[: len(buf) - keep]


async def _feed(writer: asyncio.StreamWriter | None, data: bytes | None) -> None:
    if writer is None:
        return
    try:
        if data:
            writer.write(data)
            await writer.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the command exited without reading all of its input
    finally:
        writer.close()


async def _finish(tasks: Sequence[asyncio.Task[None]], grace: float) -> None:
    if tasks:
        _done, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _not_found(argv: Sequence[str], exc: OSError) -> bytes:
    reason = "command not found" if isinstance(exc, FileNotFoundError) else exc.strerror
    return f"{argv[0]}: {reason}\n".encode()


class LocalTransport(Transport):
    """Runs argv on this machine with ``create_subprocess_exec`` (never through a shell).

    ``env`` adds variables to this process's environment for the command. A missing
    executable gives exit status 127 and ``<argv0>: command not found``, as a shell would,
    so that hops can report it the same way whether they run here or remotely.
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(env) if env else None

    def label(self) -> str:
        return "local"

    def command_line(self, argv: Sequence[str], *, stdin: bool = False) -> list[str]:
        if not argv:
            raise ValueError("empty argv")
        return list(argv)

    async def _spawn(self, argv: Sequence[str], *, stdin: bool, limit: int = 65536) -> _Child:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.subprocess_exec(
            lambda: _Protocol(limit, loop),
            *argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, **self.env} if self.env else None,
        )
        return _Child(asyncio.subprocess.Process(transport, protocol, loop), transport, protocol)

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,  # noqa: ASYNC109 - on expiry the process group is killed
        stdin: bytes | None = None,
        check: bool = True,
    ) -> CommandResult:
        """Run argv; on timeout or cancellation kill its process group."""
        argv = self.command_line(argv)
        started = time.perf_counter()
        try:
            child = await self._spawn(argv, stdin=stdin is not None)
        except (FileNotFoundError, PermissionError) as exc:
            return CommandResult(
                argv, NOT_FOUND_RC, b"", _not_found(argv, exc), time.perf_counter() - started
            )
        out, err = bytearray(), bytearray()
        pumps = [
            asyncio.create_task(_pump(child.proc.stdout, out)),
            asyncio.create_task(_pump(child.proc.stderr, err)),
        ]
        feeder = asyncio.create_task(_feed(child.proc.stdin, stdin))
        try:
            async with asyncio.timeout(timeout):
                returncode = await child.wait()
            await _finish(pumps, DRAIN_GRACE)
        except TimeoutError:
            child.kill_group()
            await child.wait()
            await _finish(pumps, DRAIN_GRACE)
            raise CommandTimeout(argv, timeout, bytes(out), bytes(err)) from None
        except BaseException:
            child.kill_group()
            raise
        finally:
            await _finish([*pumps, feeder], 0)
            child.release()
        duration = time.perf_counter() - started
        return CommandResult(argv, returncode, bytes(out), bytes(err), duration)

    def stream(
        self, argv: Sequence[str], *, stdin: bytes | None = None
    ) -> AbstractAsyncContextManager[LineStream]:
        return self._stream(self.command_line(argv), stdin)

    @asynccontextmanager
    async def _stream(self, argv: list[str], stdin: bytes | None) -> AsyncIterator[LineStream]:
        started = time.perf_counter()
        try:
            child: _Child | None = await self._spawn(
                argv, stdin=stdin is not None, limit=STREAM_LINE_LIMIT
            )
            spawn_error = b""
        except (FileNotFoundError, PermissionError) as exc:
            child, spawn_error = None, _not_found(argv, exc)
        err = bytearray(spawn_error)
        tasks = []
        if child is not None:
            tasks = [
                asyncio.create_task(_pump(child.proc.stderr, err, STREAM_STDERR_KEEP)),
                asyncio.create_task(_feed(child.proc.stdin, stdin)),
            ]

        async def lines() -> AsyncGenerator[str, None]:
            returncode = NOT_FOUND_RC
            if child is not None:
                assert child.proc.stdout is not None
                while line := await child.proc.stdout.readline():
                    yield line.decode("utf-8", "replace").rstrip("\n")
                returncode = await child.wait()
                await _finish(tasks, DRAIN_GRACE)
            stream.returncode, stream.stderr = returncode, bytes(err)
            result = CommandResult(
                argv, returncode, b"", stream.stderr, time.perf_counter() - started
            )
            for check in stream.checks:
                check(result)

        def terminate() -> None:
            if child is not None:
                child.kill_group()

        iterator = lines()
        stream = LineStream(iterator, terminate, argv)
        try:
            yield stream
        finally:
            terminate()
            await iterator.aclose()
            if child is not None:
                await child.wait()
                await _finish(tasks, 0)
                child.release()
