"""Constants, markers and the agent's one error type."""

from __future__ import annotations

import re

BEGIN_MARKER = "SPECDASH-BEGIN"
RESULT_MARKER = "SPECDASH-RESULT"
MARKER_VAR = "SPECDASH_RUN_ID"
SUPERVISOR_COMM = "specdash-sup"
CMDLINE_LIMIT = 4096
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$")
NVIDIA_INDEXED_RE = re.compile(r"/dev/nvidia([0-9]+)$")
NVIDIA_SHARED_RE = re.compile(r"/dev/nvidia(?:ctl|-uvm|-uvm-tools)$")
POLL_SECONDS = 0.1


class AgentError(Exception):
    """A refusal or bad input: reported as ok false with its message, no traceback."""
