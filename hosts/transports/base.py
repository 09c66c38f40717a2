from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

STDERR_TAIL_LINES = 20


def tail(data: bytes | str, lines: int = STDERR_TAIL_LINES) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


class TransportError(Exception):
    """Base of every error raised by a transport."""


class TransportConfigError(TransportError, ValueError):
    """A hop was configured with a value that could be read as an option or is unusable."""


class HopError(TransportError):
    """A hop of the chain could not be entered (ssh could not connect, a container is missing)."""

    def __init__(
        self,
        hop_index: int,
        hop_description: str,
        message: str,
        returncode: int | None = None,
        stderr_tail: str = "",
    ) -> None:
        self.hop_index = hop_index
        self.hop_description = hop_description
        self.message = message
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        super().__init__(f"hop {hop_index} ({hop_description}): {message}")


class CommandTimeout(TransportError):
    """The command did not finish in time; the local process (ssh, pct, ...) was killed."""

    def __init__(
        self,
        command_line: Sequence[str],
        timeout: float,
        stdout: bytes = b"",
        stderr: bytes = b"",
    ) -> None:
        self.command_line = list(command_line)
        self.timeout = timeout
        self.stdout = stdout
        self.stderr = stderr
        self.chain = "local"
        # Set by run_script: whether the far end had started the script (begin sentinel seen).
        self.entered: bool | None = None
        super().__init__(command_line, timeout)

    def __str__(self) -> str:
        where = {None: "", True: " (the command had started)", False: " (not started yet)"}
        return (
            f"{self.chain}: no answer within {self.timeout:g}s{where[self.entered]}, "
            f"killed {self.command_line[0]}"
        )


class CommandFailed(TransportError):
    """Every hop was entered but the command itself failed (non-zero exit, no result line)."""

    def __init__(
        self, chain: str, message: str, returncode: int | None, stdout: str, stderr: str
    ) -> None:
        self.chain = chain
        self.message = message
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        detail = f"\n{tail(stderr)}" if stderr.strip() else ""
        super().__init__(f"{chain}: {message}{detail}")


@dataclass(frozen=True)
class CommandResult:
    command_line: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes
    duration: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


Check = Callable[[CommandResult], None]


@dataclass
class LineStream:
    """Output of a running command, line by line; ``terminate()`` kills the local process."""

    lines: AsyncIterator[str]
    terminate_process: Callable[[], None]
    command_line: list[str]
    checks: list[Check] = field(default_factory=list)
    returncode: int | None = None
    stderr: bytes = b""

    def __aiter__(self) -> AsyncIterator[str]:
        return self.lines

    def terminate(self) -> None:
        self.terminate_process()


class Transport(ABC):
    """Runs argv somewhere: here, or through a chain of hops (ssh, pct exec, docker exec...).

    Hops are numbered from 1, starting next to this machine; ``LocalTransport`` is not a hop.
    """

    inner: Transport | None = None

    @abstractmethod
    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,  # noqa: ASYNC109 - the local process must be killed, not just abandoned
        stdin: bytes | None = None,
        check: bool = True,
    ) -> CommandResult:
        """Run argv to completion and return its result, whatever its exit status.

        Raise ``HopError`` when the result shows a hop failed (recognised by the tools'
        error messages; ``check=False`` returns the result instead) and ``CommandTimeout``,
        after killing the local process, when it runs past ``timeout``."""

    @abstractmethod
    def stream(
        self, argv: Sequence[str], *, stdin: bytes | None = None
    ) -> AbstractAsyncContextManager[LineStream]:
        """Start argv and yield its stdout line by line; leaving the block kills it."""

    @abstractmethod
    def command_line(self, argv: Sequence[str], *, stdin: bool = False) -> list[str]:
        """The exact local argv that ``run(argv)`` executes."""

    @abstractmethod
    def label(self) -> str:
        """This hop alone, e.g. ``ssh root@pve:22`` or ``pct exec 129``."""

    def location(self) -> str | None:
        """Where the next hop runs, for error messages (``root@pve``); None for here."""
        return None

    def hops(self) -> list[Hop]:
        """The hops from this machine outwards; each one is also the chain up to itself."""
        return []

    def describe(self) -> str:
        hops = self.hops()
        return " → ".join(h.label() for h in hops) if hops else self.label()

    def command_text(self, argv: Sequence[str], *, stdin: bool = False) -> str:
        """``command_line`` as one copy-pasteable shell line."""
        return shlex.join(self.command_line(argv, stdin=stdin))


class Hop(Transport):
    """A transport that rewrites argv and hands it to the transport it wraps."""

    inner: Transport

    def __init__(self, inner: Transport) -> None:
        self.inner = inner

    @abstractmethod
    def wrap(self, argv: Sequence[str], *, stdin: bool) -> list[str]:
        """The argv for the inner transport that runs argv through this hop."""

    def failure(self, result: CommandResult) -> str | None:
        """An operator-level reason when ``result`` shows this hop failed, else None."""
        return None

    def prepare(self) -> None:
        """Called before each command (e.g. to create the ssh control directory)."""

    def hops(self) -> list[Hop]:
        return [*self.inner.hops(), self]

    @property
    def index(self) -> int:
        return len(self.inner.hops()) + 1

    def hop_description(self) -> str:
        where = self.inner.location()
        return f"{self.label()} on {where}" if where else self.label()

    def hop_error(self, message: str, result: CommandResult | None = None) -> HopError:
        return HopError(
            self.index,
            self.hop_description(),
            message,
            result.returncode if result else None,
            tail(result.stderr) if result else "",
        )

    def check(self, result: CommandResult) -> None:
        message = self.failure(result)
        if message is not None:
            raise self.hop_error(message, result)

    def command_line(self, argv: Sequence[str], *, stdin: bool = False) -> list[str]:
        return self.inner.command_line(self.wrap(argv, stdin=stdin), stdin=stdin)

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,  # noqa: ASYNC109 - the local process must be killed, not just abandoned
        stdin: bytes | None = None,
        check: bool = True,
    ) -> CommandResult:
        self.prepare()
        wrapped = self.wrap(argv, stdin=stdin is not None)
        try:
            result = await self.inner.run(wrapped, timeout=timeout, stdin=stdin, check=check)
        except CommandTimeout as exc:
            exc.chain = self.describe()
            raise
        if check:
            self.check(result)
        return result

    @asynccontextmanager
    async def stream(
        self, argv: Sequence[str], *, stdin: bytes | None = None
    ) -> AsyncIterator[LineStream]:
        self.prepare()
        wrapped = self.wrap(argv, stdin=stdin is not None)
        async with self.inner.stream(wrapped, stdin=stdin) as lines:
            lines.checks.append(self.check)
            yield lines
