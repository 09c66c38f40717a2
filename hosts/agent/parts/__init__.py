"""specdash far-side process agent.

Sent as a script on stdin and run as ``python3 - <command> '<json-args>'`` on the GPU host (or
inside its container). Only the Python 3.8+ standard library and a Linux /proc are assumed.

Output: the first line is ``SPECDASH-BEGIN`` (every hop was entered), the last line is
``SPECDASH-RESULT <json>``: ``{"ok": true, ...}`` or ``{"ok": false, "error": "...", ...}``
(an unexpected exception adds ``"traceback"``). The exit status is 0 whenever RESULT was printed.

Commands (JSON arguments; ``?`` marks optional keys, defaults in brackets):

preflight {port?, gpus? [[]], binary?, workdir?, gpu_mem_threshold_mb? [1024], device_dirs?}
  -> {ok, problems: [str], port: PORT, gpus: GPUS, binary: {name, path, found},
      workdir: {path, exists}}
  PORT = {port, free, listening, in_use, holders: [PROC], bind_errors: {addr: str}, notes: [str]}
  GPUS = {available, error, devices: [{index, used_mb, total_mb, held}], holders: [HOLDER]}
  ``ok`` is false exactly when ``problems`` is not empty.

launch {run_id, argv: [str], env? {str: str}, workdir?, run_dir, port?}
  -> {ok, already_running, run_id, pid, supervisor_pid, pgid, sid, start_time, boot_id,
      cmdline: [str], log_path, run_dir}
  A refusal (live members without a live server, exec failure) is ok false with ``error``.
  ``{uid}`` in run_dir (and in status/stop/log_tail's) is this user's uid. run_dir and its
  parent (the run root) are created 0700; an existing one that is a symlink, belongs to
  another user or is writable by others is refused ("unsafe run directory: ..."), as is a
  parent chain someone else could swap out (not root's or ours, or writable and not sticky).
  The server runs in its own process group inside the supervisor's session; the supervisor
  writes ``<run_dir>/server.json`` (the launch answer) and, when the server exits,
  ``<run_dir>/exit_code``: the exit status, or ``-N`` when signal N killed it. A server that
  dies of SIGTERM therefore records -15; 143 appears only when the server itself exits with
  128+15 (a shell wrapper does that). 127/126 mean the argv could not be executed.

status {run_id, pid, start_time, run_dir?, port?, pgid?, sid?, log_lines? [50]}
  -> {ok, alive, state, exit_code: int|null, members: [MEMBER], port: PORT|null, log: LOG|null}
  A dead server whose supervisor lives gets its code: the status waits for the supervisor to
  write it (EXIT_CODE_WAIT_S at most); null when no supervisor is left to write it.

members {run_id, pid?, pgid?, sid?, start_time?}
  -> {ok, members: [MEMBER], unreadable_environ: [pid], notes: [str]}
  MEMBER = PROC + {found_by: ["pid"|"pgid"|"sid"|"marker"], role: "server"|"supervisor"|"process",
                   environ_readable: bool}
  PROC = {pid, ppid, pgid, sid, state, comm, cmdline: [str], start_time}
  pgid/sid matches need start_time: a process that started before the server is a member only
  when it carries the marker ``SPECDASH_RUN_ID=<run_id>`` (pid reuse guard). status, members,
  stop and verify also take ``boot_id``: when the host rebooted since the launch, the recorded
  pid/pgid/sid are ignored and only the marker counts.

stop {run_id, pid?, pgid?, sid?, start_time?, supervisor_pid?, run_dir?, grace_seconds? [10],
      kill_wait_seconds? [5]}
  -> {ok, clean, terminated: [pid], killed: [pid], exited: [pid], survivors: [pid],
      zombies: [pid], d_state: [pid], skipped: [{pid, reason}], exit_code: int|null, duration}
  ``exited``: found by a scan but gone before its signal (ended by itself meanwhile).
  ``clean`` is false when survivors remain; ``verify`` is the authority on "stopped".

verify {run_id, port?, gpus? [[]], baseline_gpu_mem_mb? {index: mib}, tolerance_mb? [512],
        pid?, pgid?, sid?, start_time?, device_dirs?}
  -> {ok, verdict: "stopped"|"dirty", reasons: [str], members: [MEMBER], port: PORT|null,
      gpu_memory: "unknown"|{index: {used_mb, baseline_mb, ok}}, holders: [HOLDER]}
  ``ok`` is null when the reading or the baseline is missing (not compared, not a pass).
  HOLDER = PROC + {gpus: [int], all_gpus: bool, devices: [path], counts: bool}
  Holders come only from a scan of /proc/*/fd for ``*/dev/nvidia<N>``, ``*/dev/nvidiactl`` and
  ``*/dev/nvidia-uvm`` (``all_gpus``); nvidia-smi pids are never used (in a container they are
  host pids). A holder ``counts`` (makes the verdict dirty) when it holds one of the instance's
  numbered devices, or when it is a member: every CUDA process on the host holds nvidiactl,
  so a neighbour on another GPU must not make every stop dirty. ``device_dirs`` (a list of
  directories, e.g. ["/dev"] or a simulator's "<state-dir>/dev") limits which device files
  count; by default they count wherever they are.

kill_pids {pids: [{pid, start_time}], signal? ["KILL"], wait_seconds? [0]}
  -> {ok, signalled: [pid], skipped: [{pid, reason}], exited: [pid], alive: [pid]}

log_tail {run_dir, lines? [50], max_bytes? [65536]}
  -> {ok, path, exists, size, lines: [str], truncated}

probe {pythons? [[]], files? [[]]}
  -> {ok, hostname, uid, user, kernel, python, executable, container: {detected, evidence},
      nvidia_smi: {available, gpus: [str], error, driver_version, cuda_version, details},
      engines: {python: {package: version|null}}, load_avg: [1, 5, 15 min],
      files: [{path, kind: file|dir|missing, size, mtime, sha256?, files?, error?}]}
  ``details`` is nvidia-smi's CSV of PROBE_GPU_FIELDS (no header, no units), "" without it.
  ``files`` (model paths, at most 16): a file's size and mtime, and its sha256 when at most
  HASH_MAX_BYTES; a directory's regular files summed (size, newest mtime, count), not hashed.

Fencing: any command whose arguments have both ``run_dir`` and ``controller`` (an integer,
the id of the job driving that run; a job that takes over has a higher one) is checked under
an flock on ``<run_dir>/controller.lock`` held for the whole command: a controller lower than
the highest one seen is refused (ok false, ``superseded: true``) and nothing is done. Every
check appends ``{t, controller, command, accepted}`` to ``<run_dir>/controllers.log`` (moved to
``controllers.log.1`` past 1 MiB). The run directory is expanded and checked as launch's is.
"""

# The script is these modules, joined in this order by hosts.agent.join: each may use what an
# earlier one defines, and none imports anything but the standard library and its siblings.
from __future__ import annotations

PARTS = (
    "base",
    "procfs",
    "ports",
    "gpus",
    "files",
    "arguments",
    "launch",
    "control",
    "probe",
    "main",
)
