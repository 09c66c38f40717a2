"""Controller side of the far-side process agent (no Django here).

The agent is one stdlib-only script, joined from the modules of ``parts/`` by ``join.py``
(``AGENT_SOURCE``; ``parts/__init__.py`` documents its commands). A transport runs
``agent_argv(command, args)`` on the far side with ``AGENT_SOURCE`` on stdin, and the
controller reads the answer with ``parse_agent_output``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from hosts.agent.join import join_agent

AGENT_SOURCE: str = join_agent()

BEGIN_MARKER = "SPECDASH-BEGIN"
RESULT_MARKER = "SPECDASH-RESULT"
MARKER_VAR = "SPECDASH_RUN_ID"

_TAIL_CHARS = 2000


class AgentProtocolError(RuntimeError):
    """The agent's answer is missing or unreadable.

    ``stage`` says how far it got: ``"begin"`` (no BEGIN line: a hop before the agent
    failed), ``"result"`` (BEGIN but no RESULT: the agent crashed or was killed) or
    ``"json"`` (a RESULT line that is not a JSON object).
    """

    def __init__(self, message: str, *, stage: str, stdout: str, stderr: str) -> None:
        self.stage = stage
        self.stdout = stdout
        self.stderr = stderr
        details = []
        if stdout.strip():
            details.append("stdout tail: " + stdout[-_TAIL_CHARS:].strip())
        if stderr.strip():
            details.append("stderr tail: " + stderr[-_TAIL_CHARS:].strip())
        super().__init__("\n".join([message, *details]))


def agent_argv(command: str, args: Mapping[str, object], *, python: str = "python3") -> list[str]:
    """The far-side argv that runs the agent, which then reads its source from stdin."""
    return [python, "-", command, json.dumps(args, separators=(",", ":"), sort_keys=True)]


def parse_agent_output(stdout: str, stderr: str = "") -> dict[str, object]:
    """The agent's RESULT object, or AgentProtocolError saying which part is missing."""
    lines = stdout.splitlines()
    if not any(line.strip() == BEGIN_MARKER for line in lines):
        raise AgentProtocolError(
            f"the agent never started (no {BEGIN_MARKER} line): a hop on the way failed",
            stage="begin",
            stdout=stdout,
            stderr=stderr,
        )
    prefix = RESULT_MARKER + " "
    for line in reversed(lines):
        if line.startswith(prefix):
            try:
                result = json.loads(line[len(prefix) :])
            except ValueError as exc:
                raise AgentProtocolError(
                    f"the agent's result is not JSON: {exc}",
                    stage="json",
                    stdout=stdout,
                    stderr=stderr,
                ) from None
            if not isinstance(result, dict):
                raise AgentProtocolError(
                    "the agent's result is not a JSON object",
                    stage="json",
                    stdout=stdout,
                    stderr=stderr,
                )
            return result
    raise AgentProtocolError(
        f"the agent started but printed no {RESULT_MARKER} line: it crashed or was killed",
        stage="result",
        stdout=stdout,
        stderr=stderr,
    )
