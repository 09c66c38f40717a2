"""The speculation-tuning loop end to end on the calibrated simulator, through the REST API only.

A throwaway dashboard (its own data dir and SQLite database, the demo's simulated profiles,
Daphne + job worker on a free port) runs a parameter matrix of the "Simulated SGLang EAGLE-3"
profile (draft lengths 1, 2, 3, 5 and speculation off) over concurrency 1 to 250, derives the
speculation schedule, and verifies it with a follow-up experiment: the tuned arm against every
fixed variant at every level. Printed: the matrix (output tok/s per variant and level), the
schedule (bands, gains, the engines' configurations), the verification (tuned / best fixed per
level with its interval), the verdict, and the tuned arm beside the scenario's figures (EAGLE-3
96.1 tok/s single stream, baseline ~773 tok/s saturated) and beside the arms that stand for them
in this run.

This script imports nothing from the project's Django code: it runs ``manage.py`` as
subprocesses and talks HTTP. It exits non-zero when something did not complete (a server that
did not start, an experiment that failed, a route that refused); a verdict "not at least as
good" is a result and exits 0.

    python -m perf.bench_tuning                      # the full run (~30 min, 2 cores)
    python -m perf.bench_tuning --levels 1,2,8 --duration 2 --max-tokens 16

The experiment API takes one load for every level: ``requests_per_level`` is the same number at
C=1 and at C=250, and a level with fewer requests than C never has C in flight. So the default
load is a duration per level (closed loop: every slot keeps sending until the duration is up,
and the requests in flight then finish), which fills every level and costs about the same at
each; ``--requests-per-level`` replaces it (give at least the top level's C).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from perf.dashboard import DashboardDidNotStart, serving
from perf.ports import free_port
from perf.tuning_report import (
    print_matrix,
    print_schedule,
    print_targets,
    print_verification,
    say,
)

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "Simulated SGLang EAGLE-3"
DRAFT_AXIS = "--speculative-num-steps"
LEVELS = (1, 2, 5, 10, 30, 70, 100, 250)
DRAFT_LENGTHS = (1, 2, 3, 5)
FINISHED = {"completed", "cancelled", "failed", "halted", "interrupted"}

# The demo profiles listen on fixed ports; this run must not meet a dashboard (or a test run)
# using them, so they move to free ones (matrix variants take their base's port).
_MOVE_PORTS = """
from hosts.models import ServerProfile
for profile, port in zip(ServerProfile.objects.order_by("name"), {ports}, strict=True):
    argv = list(profile.launch_argv)
    argv[argv.index("--port") + 1] = str(port)
    profile.port, profile.launch_argv = port, argv
    profile.save()
"""


class Failed(Exception):
    """Something did not complete: the run exits non-zero with this message."""


def manage(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    if done.returncode != 0:
        raise Failed(f"manage.py {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return done.stdout


class Api:
    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(
            base_url=url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=120
        )

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, path, **kwargs)
        if response.is_error:
            try:
                error = response.json()["error"]
                detail = f"{error['code']}: {error['message']} {error.get('fields') or ''}"
            except (ValueError, KeyError, TypeError):
                detail = response.text[:500]
            raise Failed(f"{method} {path}: {response.status_code} {detail}")
        return response.json()


def wait_experiment(api: Api, experiment_id: int, *, timeout: float) -> dict[str, Any]:
    """Poll the experiment until it finishes, printing each step as it changes state."""
    deadline = time.monotonic() + timeout
    seen: dict[int, str] = {}
    started = time.monotonic()
    while True:
        body: dict[str, Any] = api.call("GET", f"/experiments/{experiment_id}")
        steps = body.get("steps", [])
        for step in steps:
            if seen.get(step["id"]) != step["state"]:
                seen[step["id"]] = step["state"]
                done = sum(s["state"] == "done" for s in steps)
                say(
                    f"  [{time.monotonic() - started:6.0f}s] step {done}/{len(steps)}: "
                    f"{step['label']} {step['profile']}: {step['state']}"
                    + (f" ({step['reason']})" if step.get("reason") else "")
                )
        if body["finished"]:
            break
        if time.monotonic() > deadline:
            raise Failed(f"experiment {experiment_id} still {body['state']} after {timeout:.0f}s")
        time.sleep(2)
    if body["state"] != "completed":
        raise Failed(f"experiment {experiment_id} ended {body['state']}: {body['reason']}")
    say(f"  experiment {experiment_id} completed in {time.monotonic() - started:.0f}s")
    return body


def leftovers(marker: str) -> list[str]:
    """Processes of this user whose command line or environment names the run's directory (the
    simulators carry it in SPECDASH_SIM_STATE_DIR)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline or marker in environ:
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


def parse_ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"give positive integers: {text!r}")
    return values


Loop = Callable[["Api", argparse.Namespace, dict[str, Any], list[int]], int]


def run(args: argparse.Namespace, var: Path, loop: Loop | None = None) -> int:
    """A throwaway dashboard with the demo's simulated profiles, then ``loop`` (this script's
    matrix and verification by default; ``bench_schedule`` passes its own) through the API."""
    env = {
        **os.environ,
        "SPECDASH_VAR_DIR": str(var),
        # No real engines in this registry: only the simulated profiles.
        "SPECDASH_ENGINE_CACHE": str(var / "engines"),
        "SPECDASH_RUN_ROOT": str(var / "runs"),
        "SPECDASH_DATA_DIR": str(var / "data"),
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("DJANGO_SETTINGS_MODULE", "SPECDASH_DATABASE_URL", "SPECDASH_TOKEN"):
        env.pop(name, None)
    say(f"Data dir {var}; migrating and seeding the demo ...")
    manage(env, "migrate", "--no-input", "-v", "0")
    manage(env, "seed_demo")
    manage(env, "shell", "-c", _MOVE_PORTS.format(ports=[free_port(), free_port()]))
    token = manage(env, "specdash", "token", "--user", "operator", "--name", "bench").strip()
    port = free_port()
    load: dict[str, Any] = {"max_tokens": args.max_tokens, "ignore_eos": True}
    if args.requests_per_level:
        load["requests_per_level"] = args.requests_per_level
        sizing = f"{args.requests_per_level} requests per level"
    else:
        load["duration"] = args.duration
        sizing = f"{args.duration:g} s of closed-loop load per level"
    say(
        f"Levels {args.levels}; draft lengths {args.draft_lengths} + off; {sizing}; "
        f"max_tokens {args.max_tokens} (ignore_eos)"
    )
    serve = serving(
        env=env, port=port, log_path=var / "serve.log", start_timeout=120, stop_timeout=60,
        exit_with_parent=True,
    )  # fmt: skip
    with serve as url:
        api = Api(url, token)
        active: list[int] = []
        try:
            return (loop or _loop)(api, args, load, active)
        finally:
            for experiment_id in active:  # a failure or ^C mid-run: stop its servers verifiably
                body = api.call("GET", f"/experiments/{experiment_id}")
                if not body["finished"]:
                    say(f"Cancelling experiment {experiment_id} ...")
                    api.call("POST", f"/experiments/{experiment_id}/cancel")
                    deadline = time.monotonic() + 120
                    while not api.call("GET", f"/experiments/{experiment_id}")["finished"]:
                        if time.monotonic() > deadline:
                            break
                        time.sleep(1)


def _loop(api: Api, args: argparse.Namespace, load: dict[str, Any], active: list[int]) -> int:
    profiles = api.call("GET", "/profiles", params={"limit": 200})["items"]
    base = next((p for p in profiles if p["name"] == args.profile), None)
    if base is None:
        raise Failed(f"no profile named {args.profile!r}")
    started = time.monotonic()
    matrix = api.call(
        "POST",
        "/experiments/matrix",
        json={
            "profile": base["id"],
            "axes": {DRAFT_AXIS: args.draft_lengths},
            "include_off": True,
            "levels": args.levels,
            "load": load,
            "name": "bench_tuning matrix",
        },
    )["experiment"]
    active.append(matrix["id"])
    say(f"\nMatrix experiment {matrix['id']}: {', '.join(a['profile'] for a in matrix['arms'])}")
    wait_experiment(api, matrix["id"], timeout=args.timeout)
    comparison = api.call("GET", f"/experiments/{matrix['id']}/comparison")
    say()
    print_matrix(comparison)
    schedule = api.call("GET", f"/experiments/{matrix['id']}/schedule")
    say()
    print_schedule(schedule)
    if not schedule["available"]:
        raise Failed("no schedule was derived")
    verify = api.call(
        "POST", f"/experiments/{matrix['id']}/verify", json={"repeats": args.verify_repeats}
    )["experiment"]
    active.append(verify["id"])
    arms = ", ".join(a["profile"] for a in verify["arms"])
    say(f"\nVerification experiment {verify['id']}: {arms}")
    wait_experiment(api, verify["id"], timeout=args.timeout)
    report = api.call("GET", f"/experiments/{verify['id']}/verification?margin={args.margin:g}")
    verified = api.call("GET", f"/experiments/{verify['id']}/comparison")
    say()
    print_matrix(verified)
    say()
    print_verification(report)
    say()
    print_targets(verified, report)
    say(f"\nBoth experiments: {time.monotonic() - started:.0f}s")
    instances = api.call("GET", "/instances", params={"limit": 200})["items"]
    running = [f"#{i['id']} {i['profile']}: {i['state']}" for i in instances if i["active"]]
    if running:
        raise Failed("servers still active after the experiments: " + "; ".join(running))
    say(f"Every server the experiments started is stopped ({len(instances)} instances).")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=parse_ints, default=list(LEVELS), help="e.g. 1,2,5,10")
    parser.add_argument(
        "--draft-lengths", type=parse_ints, default=list(DRAFT_LENGTHS),
        help=f"values of {DRAFT_AXIS} (speculation off is always added)",
    )  # fmt: skip
    parser.add_argument("--duration", type=float, default=4.0, help="seconds of load per level")
    parser.add_argument(
        "--verify-repeats", type=int, default=3,
        help="sweeps per arm in the verification (the API's default, 3): the verdict's "
        "intervals then hold run-to-run spread",
    )  # fmt: skip
    parser.add_argument(
        "--margin", type=float, default=0.0,
        help="practical-equivalence margin of the verdict (0 <= margin < 0.5; default 0: "
        "the verification's repeats hold the run-to-run spread)",
    )  # fmt: skip
    parser.add_argument(
        "--requests-per-level", type=int, default=None,
        help="requests per level instead of --duration (the same number at every level)",
    )  # fmt: skip
    parser.add_argument("--max-tokens", type=int, default=32, help="output tokens per request")
    parser.add_argument("--profile", default=PROFILE, help="the base profile (a simulator)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per experiment")
    parser.add_argument("--keep", action="store_true", help="keep the data dir (logs, records)")
    args = parser.parse_args(argv)
    if args.requests_per_level is not None and args.requests_per_level < max(args.levels):
        say(
            f"note: {args.requests_per_level} requests per level never put C={max(args.levels)} "
            "in flight"
        )
    var = Path(tempfile.mkdtemp(prefix="specdash-bench-tuning-"))
    status = 1
    try:
        status = run(args, var)
    except (Failed, DashboardDidNotStart) as exc:
        say(f"\nFAILED: {exc}")
    except KeyboardInterrupt:
        say("\ninterrupted")
        status = 130
    finally:
        left = leftovers(str(var))
        if left:
            say("Processes left running:\n  " + "\n  ".join(left))
            status = status or 1
        else:
            say("No process of this run is left running.")
        if args.keep or status:
            say(f"Data dir kept: {var} (serve.log, runs/)")
        else:
            shutil.rmtree(var, ignore_errors=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
