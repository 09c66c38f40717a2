"""Job code reaches the database through its app's async face, read from the source.

Each app gives the async code it runs (jobs, consumers) one module named ``store.py``: an
``async`` twin of each sync service or selector that code needs (contrib.sessions' ``load`` /
``aload``), and the only place that wraps with ``sync_to_async``. Counted as text, the way
``grep -rn "sync_to_async("`` counts it (``database_sync_to_async(`` included), so a wrap in
a comment or a docstring's example counts too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The apps (the library and the engines' helpers are Django-free; the benchmark scripts under
# perf/ drive the apps from outside, as a test would).
PRODUCT = ("benchmarks", "core", "hosts", "specdash")
FACE_NAME = "store.py"

# The wraps left outside the faces. It only goes down: lower it when a module moves its wraps
# into its app's face, never raise it (add a twin to the face instead).
CEILING = 0

# Modules whose async functions go through a face for every database read and write: no wrap
# and no ``Model.objects`` in an ``async def`` (sync hooks in the same module may use the ORM).
OFF_THE_ORM = (
    "benchmarks/experiments/builds.py",
    "benchmarks/experiments/consumers.py",
    "benchmarks/experiments/runner.py",
    "benchmarks/experiments/step_run.py",
    "benchmarks/experiments/stops.py",
    "benchmarks/sweeps/consumers.py",
    "benchmarks/sweeps/distributed.py",
    "benchmarks/sweeps/events.py",
    "benchmarks/sweeps/handler.py",
    "benchmarks/sweeps/shards.py",
    "core/consumers.py",
    "core/jobs/execution.py",
    "core/jobs/registry.py",
    "core/jobs/worker.py",
    "hosts/consumers.py",
    "hosts/lifecycle/jobs.py",
    "hosts/lifecycle/stopping.py",
    "hosts/telemetry/manager.py",
)

WRAP = re.compile(r"sync_to_async\(")


def _product_modules() -> list[Path]:
    return [
        path
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def wraps_outside_faces() -> dict[str, int]:
    found = {}
    for path in _product_modules():
        if path.name == FACE_NAME:
            continue
        count = len(WRAP.findall(path.read_text()))
        if count:
            found[str(path.relative_to(ROOT))] = count
    return found


def test_the_wraps_outside_the_async_faces_only_go_down() -> None:
    found = wraps_outside_faces()
    listing = "\n".join(f"{n:4d} {m}" for m, n in sorted(found.items(), key=lambda i: -i[1]))
    assert sum(found.values()) <= CEILING, f"sync_to_async( outside the faces:\n{listing}"


def test_the_faces_exist_and_wrap() -> None:
    # The count above is only honest while the faces are where the wraps went.
    faces = [p for p in _product_modules() if p.name == FACE_NAME]
    assert {str(p.relative_to(ROOT)) for p in faces} >= {
        "benchmarks/experiments/store.py",
        "benchmarks/sweeps/store.py",
        "core/jobs/store.py",
        "core/store.py",
        "hosts/lifecycle/store.py",
        "hosts/store.py",
        "hosts/telemetry/store.py",
    }
    for face in faces:
        assert WRAP.search(face.read_text()), face


def _orm_in_async_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Attribute) and node.attr == "objects":
                found.append(f"{path.name}:{node.lineno} in {function.name}")
            elif isinstance(node, ast.Name) and node.id in ("sync_to_async",):
                found.append(f"{path.name}:{node.lineno} wraps in {function.name}")
    return found


def test_the_face_checker_sees_an_async_orm_call(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "async def f(pk):\n    return await Thing.objects.aget(pk=pk)\n\n"
        "def g(pk):\n    return Thing.objects.get(pk=pk)\n"
    )
    assert _orm_in_async_functions(sample) == ["sample.py:2 in f"]


def test_the_jobs_moved_onto_their_faces_neither_wrap_nor_touch_the_orm() -> None:
    found = [hit for module in OFF_THE_ORM for hit in _orm_in_async_functions(ROOT / module)]
    assert found == []
