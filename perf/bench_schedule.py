"""The strict schedule check: is the derived speculation schedule ever behind a fixed choice?

Through the REST API only, as an operator would, on a throwaway dashboard with the demo's
simulated profiles (``bench_tuning.run``): a parameter matrix of the "Simulated SGLang
EAGLE-3" profile, speculation off / K=1 / K=3, over C=1, 2, 4, 16, each arm swept three
times (interleaved), its schedule (switches placed on the running batch sizes the server
reported per level, docs/measurement.md), then the verification of that schedule (the
schedule against every fixed variant, three sweeps each) judged at margin 0.

Printed: the matrix, the schedule with the decision's statements (among them what each switch
point is predicted to cost the level above it), and per level the schedule against each fixed
variant (tok/s, schedule / fixed with its interval, the ratio the schedule's decision predicted
there before the verification ran, the pair's status),
then PASS when no level has a fixed variant conclusively ahead of the schedule (the pair's
status *behind*: schedule / fixed wholly below 1), else FAIL naming the levels; NO VERDICT
when a pair was not comparable (a client-limited level, say: nothing was measured there) or
the schedule is one fixed variant (the verification then runs nothing).
Exits 1 on FAIL or NO VERDICT, as on anything that did not complete.

    python -m perf.bench_schedule                  # the check (about 15 min on 2 cores)
    python -m perf.bench_schedule --duration 2     # shorter levels, wider intervals
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perf.bench_tuning import (
    DRAFT_AXIS,
    PROFILE,
    Api,
    Failed,
    leftovers,
    parse_ints,
    run,
    wait_experiment,
)
from perf.dashboard import DashboardDidNotStart
from perf.tuning_report import figures, print_matrix, print_schedule, say, table

LEVELS = (1, 2, 4, 16)
DRAFT_LENGTHS = (1, 3)
REPEATS = 3
MARGIN = 0.0


def _ratio(level: dict[str, Any]) -> str:
    ratio = level["ratio"]
    if ratio["low"] is None or ratio["high"] is None:
        return f"{ratio['point']:.3f} (no interval)"
    return f"{ratio['point']:.3f} ({ratio['low']:.3f}-{ratio['high']:.3f})"


def short(name: str) -> str:
    return name.rsplit("[", 1)[-1].rstrip("]") if name.endswith("]") else name


def print_check(report: dict[str, Any], comparison: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Per level the schedule against each fixed variant, with the ratio the schedule's
    decision predicted where it predicted one (a known trade-off reads as one; it changes no
    status); returns the failures ("C=2: off ahead, 0.972 (0.969-0.976)", with the prediction
    when there was one) and the pairs not judged (not comparable: the check did not measure
    them)."""
    by_name = figures(comparison)
    tuned = by_name[report["tuned"]]
    pairs = report["decision"]["pairwise"]
    predicted = {
        (row["concurrency"], row["predicted"]["fixed"]): row["predicted"]["ratio"]
        for row in report["levels"]
        if row.get("predicted")
    }
    levels = sorted({lv["concurrency"] for pair in pairs for lv in pair["levels"]})
    say(
        f"Schedule against each fixed variant: schedule / fixed output tok/s, "
        f"{report['confidence']:.0%} interval over the repeats, margin {report['margin']:.0%}"
    )
    rows, failures, unjudged = [], [], []
    for c in levels:
        for pair in pairs:
            fixed = pair["reference"]["name"]
            level = next((lv for lv in pair["levels"] if lv["concurrency"] == c), None)
            if level is None:
                continue
            status = level["status"]
            # The pair's candidate is the schedule: "behind" = the fixed variant is ahead.
            shown = {"behind": "FIXED AHEAD", "ahead": "schedule ahead"}.get(status, status)
            guess = predicted.get((c, fixed))
            rows.append([
                str(c), f"{tuned.get(c, {}).get('output_tok_s') or 0:.1f}", short(fixed),
                f"{by_name[fixed].get(c, {}).get('output_tok_s') or 0:.1f}", _ratio(level),
                "-" if guess is None else f"{guess:.3f}", str(level["repeats"]), shown,
            ])  # fmt: skip
            if status == "behind":
                known = "" if guess is None else f", predicted {guess:.3f} (a stated trade-off)"
                failures.append(f"C={c}: {short(fixed)} ahead, {_ratio(level)}{known}")
            if status == "not_comparable":
                unjudged.append(f"C={c} vs {short(fixed)}: {level['reason']}")
    table(
        ["C", "schedule", "fixed", "its tok/s", "ratio (interval)", "predicted", "runs", "status"],
        rows,
    )
    return failures, unjudged


def check(api: Api, args: argparse.Namespace, load: dict[str, Any], active: list[int]) -> int:
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
            "repeats": args.repeats,
            "name": "bench_schedule matrix",
        },
    )["experiment"]
    active.append(matrix["id"])
    say(f"\nMatrix experiment {matrix['id']}: {', '.join(a['profile'] for a in matrix['arms'])}")
    wait_experiment(api, matrix["id"], timeout=args.timeout)
    say()
    print_matrix(api.call("GET", f"/experiments/{matrix['id']}/comparison"))
    schedule = api.call("GET", f"/experiments/{matrix['id']}/schedule")
    say()
    print_schedule(schedule)
    if not schedule["available"]:
        raise Failed("no schedule was derived")
    for statement in schedule["decision"]["statements"]:
        say(f"  {statement}")
    if len(schedule["decision"]["steps"]) == 1:
        # The verification runs nothing for it, and the matrix's pairs are judged with the
        # decision's margin, not 0: this run shows nothing about the strict question.
        say("\nThe schedule is one fixed variant at every load; the matrix's pairs against it:")
        for pair in schedule["decision"]["pairwise"]:
            for level in pair["levels"]:
                say(
                    f"  C={level['concurrency']}: {short(pair['candidate']['name'])} / "
                    f"{short(pair['reference']['name'])} {_ratio(level)} {level['status']}"
                )
        say("NO VERDICT: nothing to verify (no variant was shown ahead of the simplest).")
        return 1
    verify = api.call(
        "POST", f"/experiments/{matrix['id']}/verify", json={"repeats": args.repeats}
    )["experiment"]
    active.append(verify["id"])
    arms = ", ".join(a["profile"] for a in verify["arms"])
    say(f"\nVerification experiment {verify['id']}: {arms}")
    wait_experiment(api, verify["id"], timeout=args.timeout)
    report = api.call("GET", f"/experiments/{verify['id']}/verification?margin={args.margin:g}")
    comparison = api.call("GET", f"/experiments/{verify['id']}/comparison")
    say()
    print_matrix(comparison)
    say()
    failures, unjudged = print_check(report, comparison)
    say(f"  verdict: {report['verdict']}")
    say(f"\nBoth experiments: {time.monotonic() - started:.0f}s")
    if failures:
        say("FAIL: a fixed variant is conclusively ahead of the schedule at " + "; ".join(failures))
        return 1
    if unjudged:
        # A client-limited (or otherwise unhealthy) level says nothing either way.
        say("NO VERDICT: not measured at " + "; ".join(unjudged))
        return 1
    say("PASS: no level has a fixed variant conclusively ahead of the schedule.")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=parse_ints, default=list(LEVELS))
    parser.add_argument(
        "--draft-lengths", type=parse_ints, default=list(DRAFT_LENGTHS),
        help=f"values of {DRAFT_AXIS} (speculation off is always added)",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=REPEATS, help="sweeps per arm, both runs")
    parser.add_argument("--duration", type=float, default=4.0, help="seconds of load per level")
    parser.add_argument("--margin", type=float, default=MARGIN, help="the verdict's margin")
    parser.add_argument("--max-tokens", type=int, default=32, help="output tokens per request")
    parser.add_argument("--profile", default=PROFILE, help="the base profile (a simulator)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per experiment")
    parser.add_argument("--keep", action="store_true", help="keep the data dir (logs, records)")
    args = parser.parse_args(argv)
    args.requests_per_level = None  # bench_tuning.run's load: a duration per level
    var = Path(tempfile.mkdtemp(prefix="specdash-bench-schedule-"))
    status = 1
    started = time.monotonic()
    try:
        status = run(args, var, check)
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
        say(f"Wall time: {time.monotonic() - started:.0f}s")
        if args.keep or status:
            say(f"Data dir kept: {var} (serve.log, runs/)")
        else:
            shutil.rmtree(var, ignore_errors=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
