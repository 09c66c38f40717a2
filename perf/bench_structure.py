"""``make bench-structure REF=<commit>``: a refactor keeps the figures, shown on the same records.

The simulator serves in real time, so two runs of one sweep never give equal figures; what a
structural change must keep is the pipeline from records to figures. So each of two trees
(REF, checked out in a temporary ``git worktree``, and this one) produces a fixed simulated
sweep and a fixed experiment through the product's real path (``migrate``, ``seed_demo``, a
dashboard served with its job worker, ``manage.py specdash`` over the REST API), and then
both trees compute, from each tree's data, the figures that ``perf/structure_figures.py``
collects (records as read, level summaries and columns recomputed from the records, server
figures from the kept scrapes, each experiment's comparison rebuilt with its verdicts and
decisions, the audit). Each tree runs on its own copy of the data, at the same path.

Compared exactly, the figures of the two trees and the stored ones against those the other
tree recomputes: a leaf is equal when its JSON text is (a float's ``repr`` is its bits). A
difference is listed by its path, with its relative difference where it is a number. Stored
leaves that nothing recomputes from the records (a level's clock anchor, the client's own
health, its status) are counted aside; a comparison's ``built_at`` is left out.

Exits 1 on any difference; refuses (exit 2) when the two trees' migrations differ, since the
data of one would then not be the other's.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from perf.structure_compare import print_table, tabulate

ROOT = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).resolve().with_name("structure_figures.py")
# The commit the first structural step's second round started from.
DEFAULT_REF = "c0360e5"
BASELINE, EAGLE = "Simulated SGLang baseline", "Simulated SGLang EAGLE-3"
# Small and fixed: a three-level sweep of the baseline, a two-level A B B A experiment; an SLO
# so the goodput figures and verdicts are part of what is compared. The simulator's draws are
# seeded (its --seed, which the demo profiles leave at 0), the comparison's bootstrap by its
# own seed.
LOAD = ["--requests", "8", "--max-tokens", "16", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50"]
SWEEP_LEVELS, EXPERIMENT_LEVELS, REPEATS = "1,2,4", "1,2", "2"
CLI_TIMEOUT_S = 600.0

_MOVE_PORTS = """
from hosts.models import ServerProfile
for profile, port in zip(ServerProfile.objects.order_by("name"), {ports}, strict=True):
    argv = list(profile.launch_argv)
    argv[argv.index("--port") + 1] = str(port)
    profile.port, profile.launch_argv = port, argv
    profile.save()
"""


class Refused(RuntimeError):
    """The two trees cannot be compared on the same data (their migrations differ)."""


@dataclass
class Tree:
    label: str
    root: Path
    commit: str


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def environment(var: Path) -> dict[str, str]:
    """Only this run's settings: every SPECDASH_* of the caller's environment left out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDASH_")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update(
        SPECDASH_VAR_DIR=str(var),
        SPECDASH_ENGINE_CACHE=str(var / "engines"),  # the simulated profiles only
        SPECDASH_RUN_ROOT=str(var / "runs"),
        PYTHONUNBUFFERED="1",
    )
    return env


def manage(tree: Tree, env: dict[str, str], *args: str, timeout: float = 300.0) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=tree.root, env=env, capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(
            f"{tree.label}: manage.py {' '.join(args)} exited {done.returncode}:\n"
            f"{done.stdout[-2000:]}{done.stderr[-3000:]}"
        )
    return done.stdout


@contextmanager
def serving(tree: Tree, env: dict[str, str], port: int, log: Path) -> Iterator[str]:
    """The tree's own ``manage.py serve`` (Daphne and the job worker) until the block ends."""
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port)], cwd=tree.root,
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 90
            while True:
                try:
                    if httpx.get(url + "/accounts/login/", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        f"{tree.label}: the dashboard did not start:\n{log.read_text()[-3000:]}"
                    )
                time.sleep(0.3)
            yield url
        finally:
            try:
                os.killpg(server.pid, signal.SIGTERM)
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(server.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            server.wait()


def produce(tree: Tree, var: Path, ports: list[int]) -> None:
    """The fixed sweep and experiment, through the dashboard and ``manage.py specdash``."""
    env = environment(var)
    var.mkdir(parents=True, exist_ok=True)
    manage(tree, env, "migrate", "--no-input", "-v", "0")
    manage(tree, env, "seed_demo")
    manage(tree, env, "shell", "-c", _MOVE_PORTS.format(ports=ports[1:3]))
    token = manage(tree, env, "specdash", "token", "--user", "operator").strip()
    with serving(tree, env, ports[0], var / "serve.log") as url:

        def cli(*args: str) -> Any:
            out = manage(
                tree, env, "specdash", "--url", url, "--token", token, "--json", *args,
                timeout=CLI_TIMEOUT_S,
            )  # fmt: skip
            return json.loads(out)

        instance = cli("start", BASELINE, "--wait")["id"]
        sweep = cli("sweep", str(instance), "--levels", SWEEP_LEVELS, *LOAD, "--wait")
        cli("stop", str(instance), "--wait")
        experiment = cli(
            "experiment", "create", BASELINE, EAGLE, "--levels", EXPERIMENT_LEVELS, *LOAD,
            "--repeats", REPEATS, "--wait",
        )  # fmt: skip
    for what, body in (("sweep", sweep), ("experiment", experiment)):
        if body["state"] != "completed":
            raise SystemExit(f"{tree.label}: the fixed {what} ended {body['state']}: {body}")
    print(f"{tree.label}: produced sweep {sweep['id']} and experiment {experiment['id']}")


def migrations(tree: Tree, var: Path) -> str:
    var.mkdir(parents=True, exist_ok=True)
    return manage(tree, environment(var), "showmigrations", "--list")


def view_of(data: Path, view: Path) -> None:
    """A fresh copy of ``data`` at ``view``, every path to ``data`` it stores rewritten (the
    records files are named by absolute path in the database)."""
    shutil.rmtree(view, ignore_errors=True)
    shutil.copytree(
        data, view, ignore=shutil.ignore_patterns("runs", "serve.log", "ssh-control", "sim-gpu")
    )
    with sqlite3.connect(view / "specdash.sqlite3") as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
            for column in columns:
                # Names read from the database's own catalogue above, not given from outside.
                update = (
                    f'UPDATE "{table}" SET "{column}" = replace("{column}", ?, ?) '  # noqa: S608
                    f'WHERE typeof("{column}") = \'text\' AND instr("{column}", ?) > 0'
                )
                db.execute(
                    update,
                    (str(data), str(view), str(data)),
                )


def figures_of(tree: Tree, data: Path, view: Path, out: Path) -> dict[str, Any]:
    """What ``tree`` computes from (a copy of) ``data``, by the driver run inside that tree."""
    view_of(data, view)
    # The driver runs from outside both trees, so that only the tree's own modules are found.
    driver = view.parent / "structure_figures.py"
    shutil.copy(DRIVER, driver)
    done = subprocess.run(
        [sys.executable, str(driver), "--out", str(out)], cwd=tree.root,
        env={**environment(view), "PYTHONPATH": str(tree.root)}, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{tree.label}: the figures driver failed:\n{done.stderr[-4000:]}")
    loaded: dict[str, Any] = json.loads(out.read_text())
    return loaded


def checked_out(ref: str, root: Path, label: str) -> Tree:
    """``ref`` checked out at ``root`` (detached), sharing this tree's virtualenv."""
    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    if not root.exists():
        git("worktree", "add", "--detach", "--quiet", str(root), commit)
        (root / ".venv").symlink_to((ROOT / ".venv").resolve())
    return Tree(f"{label} {commit[:9]}", root, commit)


def this_tree() -> Tree:
    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return Tree(f"HEAD {commit[:9]}{' + local changes' if dirty else ''}", ROOT, commit)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default=DEFAULT_REF, help=f"default {DEFAULT_REF}")
    parser.add_argument("--port-base", type=int, default=9220, help="six ports from here")
    parser.add_argument(
        "--against",
        help="compare REF with this commit (checked out beside it) instead of this tree",
    )
    parser.add_argument("--keep", action="store_true", help="keep the working folder")
    parser.add_argument(
        "--reuse",
        type=Path,
        help="a folder that --keep kept (same REF): its data again, not produced anew",
    )
    args = parser.parse_args()
    base = args.reuse or Path(tempfile.mkdtemp(prefix="specdash-structure-"))
    worktrees = [base / "ref-tree", *([base / "against-tree"] if args.against else [])]
    trees = [checked_out(args.ref, worktrees[0], "REF")]
    trees.append(
        checked_out(args.against, worktrees[1], args.against) if args.against else this_tree()
    )
    # The commits whose data a kept folder holds (this tree's own may have changed since).
    produced_by, commits = (
        base / "commits",
        " ".join(t.commit for t in trees[: 1 + bool(args.against)]),
    )
    if args.reuse is None:
        produced_by.write_text(commits)
    elif not produced_by.exists() or produced_by.read_text() != commits:
        raise SystemExit(f"{base} was not kept by a run of {commits}")
    print(f"comparing {trees[0].label} with {trees[1].label} in {base}")
    differences = 0
    try:
        listed = [migrations(tree, base / f"migrations-{i}") for i, tree in enumerate(trees)]
        if listed[0] != listed[1]:
            changed = difflib.unified_diff(
                listed[0].splitlines(), listed[1].splitlines(), trees[0].label, trees[1].label,
                lineterm="",
            )  # fmt: skip
            raise Refused(
                "the two trees' migrations differ (showmigrations), so one's data is not the "
                "other's:\n" + "\n".join(changed)
            )
        for i, tree in enumerate(trees):
            data = base / f"data-{i}"
            if args.reuse is None:
                produce(tree, data, [args.port_base + 3 * i + k for k in range(3)])
        for i, producer in enumerate(trees):
            data = base / f"data-{i}"
            by = [
                figures_of(tree, data, base / "view", base / f"figures-{i}-by-{j}.json")
                for j, tree in enumerate(trees)
            ]
            table = tabulate(by[i], by[1 - i])
            moved = sorted(k for k, v in by[1 - i]["homes"].items() if by[i]["homes"].get(k) != v)
            print_table(
                f"data produced by {producer.label}: its figures against {trees[1 - i].label}'s"
                + (f" (imported from a new home: {', '.join(moved)})" if moved else ""),
                table,
            )
            differences += sum(tally.different for _, tally in table.rows())
    except Refused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    finally:
        if not (args.keep or args.reuse):
            for root in worktrees:
                git("worktree", "remove", "--force", str(root))
            shutil.rmtree(base, ignore_errors=True)
    if args.keep:
        removals = "; ".join(f"git worktree remove --force {root}" for root in worktrees)
        print(f"kept {base}; when done: {removals}")
    print(f"\n{'DIFFERENT' if differences else 'EQUAL'}: {differences} difference(s)")
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
