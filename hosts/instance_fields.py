"""The instance columns a state transition may write beside its state
(``hosts.services.instance_transition``), declared once so that every caller is checked by
name and type."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict


class InstanceFields(TypedDict, total=False):
    """The instance columns a transition may write beside its state (``instance_transition``)."""

    reason: str
    evidence: Mapping[str, object]  # what the step that judged it found (StopEvidence, ...)
    stop_requested: bool
    exit_code: int | None
    log_tail: str
    pid: int | None
    pgid: int | None
    sid: int | None
    supervisor_pid: int | None
    proc_start_time: int | None
    boot_id: str
    run_dir: str
    log_path: str
    baseline_gpu_memory: Mapping[str, int]  # MiB in use per GPU index before launch
    server_info: Mapping[str, object]  # what the server reported about itself
