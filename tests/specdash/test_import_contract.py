"""The import contract, read from the source with ``ast`` (no module is imported).

Every import statement of every first-party module counts, at module level or deferred inside
a function (a deferred import is still a dependency: the 16-module cycle this contract
replaced was closed by one). Three rules:

- The library (load generator, simulator, statistics) and the other Django-free modules
  import nothing from Django, nor from a package built on it, nor from the apps: they run as
  their own processes and as plain libraries.
- ``hosts`` does not import ``benchmarks``, except for the back-edges listed below, which
  only shrink. The direction is one way: the core (``core.realtime``, the job queue),
  then ``hosts``, then ``benchmarks``.
- No import cycle crosses from one top-level package to another, and the job registry
  imports no app (the apps register their handlers in ``AppConfig.ready()``).
- Inside ``benchmarks``, no two parts (a slice or a top-level module) import each other
  (counted as ``perf.import_arrows`` counts them).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from functools import cache
from importlib import metadata
from pathlib import Path

from perf.import_arrows import imported_names, module_arrows, part_arrows, two_way_pairs

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = ("specdash", "core", "hosts", "benchmarks", "benchlib", "perf", "engines")

# Django-free: the library; the host-side pieces that also run without Django (the transports,
# the far-side agent, the telemetry parsers and probes); the real-engine helpers; and the
# benchmark scripts that drive the library as plain processes.
DJANGO_FREE = (
    "benchlib.loadgen",
    "benchlib.simulator",
    "benchlib.stats",
    "benchlib.json_types",
    "perf.bench_aa",
    "perf.bench_trace_ab",
    "perf.bench_controller",
    "perf.llamacpp_server",
    "perf.bench_loadgen",
    "perf.bench_simulator",
    "perf.bench_tuning",
    "perf.gpu_check",
    "perf.dashboard",
    "perf.ports",
    "perf.tuning_report",
    "engines",
    "hosts.agent",
    "hosts.transports",
    "hosts.telemetry.deltas",
    "hosts.telemetry.engine_profiles",
    "hosts.telemetry.hostload",
    "hosts.telemetry.llamacpp",
    "hosts.telemetry.nvidia_smi",
    "hosts.telemetry.probes",
    "hosts.telemetry.prometheus",
)

# The packages from the bottom up: a module imports from its own package or one below it, never
# from one above (the engines' helpers sit with the library; the benchmark scripts drive
# everything, so they are on top).
LAYERS = ("benchlib", "engines", "core", "hosts", "benchmarks", "specdash", "perf")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    found = {}
    for package in FIRST_PARTY:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _resolve(name: str) -> str | None:
    """The first-party module an import of ``name`` executes last (the name itself, or the
    package that defines it); None for anything else."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


@cache
def imports(module: str) -> frozenset[str]:
    """What ``module`` imports: first-party modules by name, anything else by its top-level
    name prefixed with ``ext:``."""
    found = set()
    for name in imported_names(module, modules()[module]):
        top = name.split(".")[0]
        if top == "tests":  # never product code's to import; kept so the rules see it
            found.add(top)
        elif top not in FIRST_PARTY:
            found.add("ext:" + top)
        elif (resolved := _resolve(name)) is not None:
            found.add(resolved)
    found.discard(module)
    return frozenset(found)


def _parents(module: str) -> Iterator[str]:
    parts = module.split(".")
    for end in range(1, len(parts)):
        yield ".".join(parts[:end])


def edges(module: str) -> set[str]:
    """Imports plus the packages above each (importing a.b.c runs a and a.b first)."""
    found = set(imports(module))
    for target in list(found):
        if not target.startswith("ext:"):
            found.update(p for p in _parents(target) if p in modules())
    return found


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@cache
def django_based() -> frozenset[str]:
    """Top-level import names of Django and of every installed distribution that requires it
    (directly or through another), so a Django plug-in counts as Django."""

    def requires(dist: str) -> set[str]:
        try:
            lines = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            return set()
        # Only unconditional requirements and plain version markers, not extras.
        return {
            re.split(r"[\s;<>=!~\[(]", line, maxsplit=1)[0].lower().replace("_", "-")
            for line in lines
            if "extra ==" not in line
        }

    distributions = metadata.packages_distributions()
    dists = {d.lower().replace("_", "-") for ds in distributions.values() for d in ds}
    based = {"django"}
    changed = True
    while changed:
        changed = False
        for dist in dists - based:
            if requires(dist) & based:
                based.add(dist)
                changed = True
    return frozenset(
        top
        for top, ds in distributions.items()
        if any(d.lower().replace("_", "-") in based for d in ds)
    )


def test_the_django_based_packages_are_recognised() -> None:
    # The rule below is only as good as this list: Django itself and its plug-ins in use.
    assert {"django", "channels", "ninja", "axes", "django_htmx"} <= django_based()
    assert not {"httpx", "twisted", "daphne", "pydantic", "setproctitle"} & django_based()


def test_the_django_free_modules_import_nothing_from_django_or_the_apps() -> None:
    free = [m for m in modules() if _in(m, DJANGO_FREE)]
    assert len([m for m in free if _in(m, ("benchlib.loadgen",))]) >= 12
    assert len([m for m in free if _in(m, ("benchlib.simulator",))]) >= 15
    assert len([m for m in free if _in(m, ("benchlib.stats",))]) >= 4
    # The packages above them run first (``hosts/__init__.py`` for ``hosts.transports``), so
    # they are held to the same rule. Checking each edge of this closed set is the transitive
    # check: whatever they reach, they reach through one of these edges.
    above = {p for m in free for p in _parents(m)}
    problems = []
    for module in sorted({*free, *above}):
        for target in sorted(edges(module)):
            if target.startswith("ext:"):
                if target[4:] in django_based():
                    problems.append(f"{module} imports {target[4:]}")
            elif not _in(target, DJANGO_FREE) and target not in above:
                problems.append(f"{module} imports {target}")
    assert not problems, "\n".join(problems)


def _layer(module: str) -> int:
    top = module.split(".")[0]
    # benchlib and engines are one layer: neither imports the other's Django-free code upwards.
    return 0 if top in ("benchlib", "engines") else LAYERS.index(top) - 1


def test_no_module_imports_a_package_above_its_own() -> None:
    upward = sorted(
        f"{module} imports {target}"
        for module in modules()
        for target in imports(module)
        if not target.startswith("ext:") and target != "tests" and _layer(target) > _layer(module)
    )
    assert upward == []


def _cycles() -> list[list[str]]:
    """Strongly connected components of the module graph with more than one module."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges(module):
            if target not in modules():
                continue
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in modules():
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_crosses_between_packages() -> None:
    crossing = [c for c in _cycles() if len({m.split(".")[0] for m in c}) > 1]
    assert crossing == []


def test_the_job_registry_imports_no_app() -> None:
    outside = {
        t for t in imports("core.jobs.registry") if not t.startswith("ext:") and not _in(t, ("core.jobs",))
    }  # fmt: skip
    assert outside == set()


def _closure(starts: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(t for t in edges(module) if not t.startswith("ext:"))
    return seen


def test_the_gpu_stand_in_and_the_statistics_need_only_the_standard_library() -> None:
    # The simulator's nvidia-smi stand-in runs under a host's plain python3 (a test host's
    # path_prepend), and the statistics are imported by it: a third-party import anywhere in
    # what they reach (the load generator's httpx, say) makes the stand-in print no GPUs.
    for root in ("benchlib.simulator.smi", "benchlib.stats"):
        reached = _closure([m for m in modules() if _in(m, (root,))])
        assert any(_in(m, ("benchlib.stats",)) for m in reached), root
        third_party = {
            f"{m} imports {t[4:]}"
            for m in reached
            for t in edges(m)
            if t.startswith("ext:") and t[4:] not in sys.stdlib_module_names
            and t[4:] != "__future__"
        }  # fmt: skip
        assert not third_party, "\n".join(sorted(third_party))


def test_the_core_imports_no_app() -> None:
    # The core (job queue, roles, tokens, realtime) is what the apps build on: hosts and
    # benchmarks import it, never the other way round.
    found = {
        (module, target)
        for module in modules()
        if _in(module, ("core",))
        for target in imports(module)
        if _in(target, ("hosts", "benchmarks"))
    }
    assert found == set()


def test_no_two_parts_of_benchmarks_import_each_other() -> None:
    # The slices (sweeps, experiments) and the shared modules (the audit, the phases, the
    # charts) import one way: a shared module a slice reads sits below it, and one that reads
    # the slices (the audit) is handed to them by the app's wiring.
    parts = part_arrows("benchmarks", module_arrows("benchmarks"))
    assert ("benchmarks.experiments", "benchmarks.sweeps") in parts  # the graph was read
    assert two_way_pairs(parts) == []
