from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hosts.transports.base import (
    CommandFailed,
    CommandResult,
    CommandTimeout,
    HopError,
    Transport,
    tail,
)

# Multi-step remote work, sent as a script on stdin instead of nested quoting.
#
# The protocol, at the far end of the chain:
#
# 1. ``sh -c`` prints ``SPECDASH-BEGIN <nonce>`` and then execs the interpreter
#    (``sh -s --``, ``bash -s --``, ``python3 -``) with the script on stdin and ``args``
#    as its arguments. The nonce travels as an argument, never in the script text, so a
#    Python script can still begin with ``from __future__`` imports.
# 2. The script answers with a last line ``SPECDASH-RESULT <json>``.
#
# No begin line means a hop could not be entered: ``diagnose()`` probes the chain up to each
# hop in turn, from this machine outwards, and names the first that does not answer. A begin
# line with a non-zero exit, or with no result line, means the command itself failed.


BEGIN = "SPECDASH-BEGIN"
RESULT = "SPECDASH-RESULT"
SH = ("sh", "-s", "--")
BASH = ("bash", "-s", "--")
PYTHON = ("python3", "-")
PROBE_TIMEOUT = 20.0

_PRELUDE = f'printf "{BEGIN} %s\\n" "$1"; shift; exec "$@"'


@dataclass(frozen=True)
class ScriptResult:
    ok: bool
    returncode: int
    value: Any
    output: list[str] = field(default_factory=list)
    stderr: str = ""
    duration: float = 0.0
    error: str | None = None


def script_argv(nonce: str, interpreter: Sequence[str], args: Sequence[str]) -> list[str]:
    """The argv that runs at the far end: the sentinel, then the interpreter."""
    if not interpreter:
        raise ValueError("empty interpreter")
    return ["sh", "-c", _PRELUDE, "specdash-script", nonce, *interpreter, *args]


def result_line(value: Any) -> str:
    """The last line a script prints, as ``run_script`` reads it."""
    return f"{RESULT} {json.dumps(value)}"


def _parse(nonce: str, result: CommandResult, expect_result: bool) -> ScriptResult | None:
    lines = result.stdout_text.splitlines()
    begin = f"{BEGIN} {nonce}"
    if begin not in lines:
        return None
    output = lines[lines.index(begin) + 1 :]
    while output and not output[-1].strip():
        output.pop()
    value: Any = None
    error: str | None = None
    if output and output[-1].startswith(f"{RESULT} "):
        raw = output.pop()[len(RESULT) + 1 :]
        try:
            value = json.loads(raw)
        except ValueError:
            error = f"unreadable {RESULT} line: {raw[:200]!r}"
    elif expect_result:
        error = f"the script finished without a {RESULT} line"
    if result.returncode != 0:
        error = f"the script exited with status {result.returncode}"
    return ScriptResult(
        ok=error is None,
        returncode=result.returncode,
        value=value,
        output=output,
        stderr=result.stderr_text,
        duration=result.duration,
        error=error,
    )


async def diagnose(
    transport: Transport,
    *,
    timeout: float = PROBE_TIMEOUT,  # noqa: ASYNC109 - per probe, passed to each run
) -> HopError | None:
    """Probe the chain hop by hop with ``echo``; the first hop that does not answer, or None."""
    token = f"SPECDASH-PROBE-{secrets.token_hex(4)}"
    for hop in transport.hops():
        try:
            result = await hop.run(["echo", token], timeout=timeout, check=False)
        except CommandTimeout:
            return hop.hop_error(f"no answer within {timeout:g}s")
        if token in result.stdout_text.split():
            continue
        reason = hop.failure(result)
        if reason is None:
            last = tail(result.stderr, 1) or "no error output"
            reason = f"could not be entered (exit {result.returncode}): {last}"
        return hop.hop_error(reason, result)
    return None


async def run_script(
    transport: Transport,
    script: str,
    interpreter: Sequence[str] = SH,
    args: Sequence[str] = (),
    timeout: float = 60.0,  # noqa: ASYNC109 - passed to Transport.run
    *,
    check: bool = True,
    expect_result: bool = True,
) -> ScriptResult:
    """Send ``script`` on stdin to ``interpreter`` at the far end of ``transport``.

    Raise ``HopError`` naming the hop that could not be entered, ``CommandTimeout`` when
    the whole run takes longer than ``timeout``, and ``CommandFailed`` when the script ran
    but failed (with ``check=False``, return a result with ``ok=False`` instead).
    """
    nonce = secrets.token_hex(8)
    argv = script_argv(nonce, interpreter, args)
    try:
        result = await transport.run(argv, timeout=timeout, stdin=script.encode(), check=False)
    except CommandTimeout as exc:
        exc.entered = f"{BEGIN} {nonce}" in exc.stdout.decode("utf-8", "replace").splitlines()
        raise
    parsed = _parse(nonce, result, expect_result)
    if parsed is None:
        problem = await diagnose(transport, timeout=min(timeout, PROBE_TIMEOUT))
        if problem is not None:
            raise problem
        parsed = ScriptResult(
            ok=False,
            returncode=result.returncode,
            value=None,
            stderr=result.stderr_text,
            duration=result.duration,
            error=f"the script did not start (exit {result.returncode}), yet every hop answers",
        )
    if check and not parsed.ok:
        assert parsed.error is not None
        raise CommandFailed(
            transport.describe(),
            parsed.error,
            parsed.returncode,
            "\n".join(parsed.output),
            parsed.stderr,
        )
    return parsed
