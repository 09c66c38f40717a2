"""The figures of one data folder as one source tree computes them, written as JSON: the driver
that ``perf/bench_structure.py`` runs in each of the two trees it compares.

Run as a plain script inside the tree under test (``cwd`` and ``PYTHONPATH`` that tree,
``SPECDASH_VAR_DIR`` a copy of the data), so the figures are the tree's own, not this file's:

- ``records``: every records file as the tree's reader gives it, a level attempt at a time;
- ``levels``: each completed or partial level's stored summary and columns, its summary
  recomputed from its records and its columns from that (the level audit's own path), and
  its server figures recomputed from its kept boundary scrapes;
- ``comparisons``: each experiment's stored comparison and the one the tree rebuilds from the
  same levels and records (the comparison audit's own function), verdicts and decisions in it;
- ``audit``: the tree's whole audit (``audit_all``), problems listed.

It imports each function from where the tree keeps it: a refactor that moves one adds the new
home at the front of its entry in ``HOMES`` (the older homes stay, for older trees); one that
renames it adds ``module:new_name``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

# name -> the modules that have held it, newest first.
HOMES: dict[str, tuple[str, ...]] = {
    "Sweep": ("benchmarks.sweeps.models", "benchmarks.models"),
    "SweepLevel": ("benchmarks.sweeps.models", "benchmarks.models"),
    "Experiment": ("benchmarks.experiments.models", "benchmarks.models"),
    "LevelState": ("benchmarks.sweeps.models", "benchmarks.models"),
    "RecordGroups": ("benchmarks.sweeps.recordfile",),
    "records_read_once": ("benchmarks.sweeps.recordfile",),
    "level_fields_from_summary": ("benchmarks.sweeps.recording",),
    "undrafted_steps": ("benchmarks.sweeps.recording",),
    "scrapes_path": ("benchmarks.sweeps.scrapes",),
    "scrapes_read": ("benchmarks.sweeps.scrapes",),
    "level_server_metrics": ("hosts.telemetry.levels",),
    "parse_engine_metrics": ("hosts.telemetry.prometheus",),
    "summarize_level": ("benchlib.loadgen.metrics",),
    "ClockAnchor": ("benchlib.loadgen.records",),
    "RequestRecord": ("benchlib.loadgen.records",),
    "Slo": ("benchlib.loadgen.goodput",),
    "comparison_rebuilt": ("benchmarks.audit_comparison",),
    "audit_all": ("benchmarks.audit",),
    "COLUMNS": ("benchmarks.audit_levels:LEVEL_COLUMNS", "benchmarks.audit_levels"),
}


def home(name: str) -> Any:
    """``name`` from the first of its HOMES this tree has; which one is kept in ``used``."""
    for entry in HOMES[name]:
        module_name, _, attr = entry.partition(":")
        attr = attr or name
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise  # the module is there but cannot be imported: that is its own failure
            continue
        if hasattr(module, attr):
            used[name] = entry
            return getattr(module, attr)
    raise SystemExit(f"{name} is in none of {HOMES[name]}: add its new home to HOMES")


used: dict[str, str] = {}


def as_json(value: Any) -> Any:
    """As the database and a JSON file hand it back (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value, default=plain))


def plain(value: Any) -> Any:
    """A figure's container as plain data, so that a refactor that turns a dict into a
    dataclass or a pydantic model (a typed boundary) compares by its fields, not its repr."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return str(value)


def level_key(sweep_pk: int, index: int, attempt: int) -> str:
    return f"sweep {sweep_pk} level {index} attempt {attempt}"


def records_of(sweep: Any) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """(rows by level attempt, the reader's other findings) of one sweep's records file."""
    scan = home("RecordGroups")(Path(sweep.records_path))
    rows: dict[str, list[Any]] = {}
    for key, group in scan.groups():
        name = f"sweep {sweep.pk} unlabelled" if key is None else level_key(sweep.pk, *key)
        rows.setdefault(name, []).extend(group)
    return as_json(rows), {"bad_lines": list(scan.bad_lines), "exists": [scan.exists]}


def level_figures(sweep: Any, level: Any, rows: list[Any]) -> dict[str, Any]:
    """One level's stored and recomputed figures, recomputed as the level audit does."""
    slo = home("Slo").from_dict((sweep.load or {}).get("slo"))
    summary = level.summary or {}
    out: dict[str, Any] = {
        "stored summary": summary,
        "stored columns": {
            name: getattr(level, name) for name in home("level_fields_from_summary")(summary)
        },
    }
    anchor_data = summary.get("anchor")
    if isinstance(anchor_data, dict):
        anchor = home("ClockAnchor")(float(anchor_data["t0_wall"]), float(anchor_data["t0_perf"]))
        parsed = [home("RequestRecord").from_json(r, anchor) for r in rows]
        fresh = home("summarize_level")(
            parsed,
            concurrency=int(summary.get("concurrency") or level.concurrency),
            mode=str(summary.get("mode") or "closed"),
            partial=bool(summary.get("partial")),
            anchor=anchor,
            slo=slo,
        )
        out["recomputed summary"] = fresh
        out["recomputed columns"] = home("level_fields_from_summary")(as_json(fresh))
        out["audited columns"] = list(home("COLUMNS"))
    out["stored server"] = level.server_metrics
    out["server"] = server_figures(sweep, level)
    as_stored: dict[str, Any] = as_json(out)
    return as_stored


def server_figures(sweep: Any, level: Any) -> Any:
    """The level's server figures recomputed from its kept boundary scrapes (None where none
    were kept), as the level audit does."""
    if not sweep.records_path or not (level.server_metrics or {}).get("available"):
        return None
    path = home("scrapes_path")(Path(sweep.records_path), index=level.index, attempt=level.attempt)
    kept = home("scrapes_read")(path)
    if kept is None:
        return None
    parse = home("parse_engine_metrics")
    before, after = (
        parse(kept[k]["text"], scraped_at=float(kept[k]["t"])) for k in ("open", "close")
    )
    undrafted = home("undrafted_steps")(sweep.environment or {})
    return home("level_server_metrics")(before, after, undrafted_steps=undrafted)


def figures() -> dict[str, Any]:
    sweeps = home("Sweep").objects.order_by("pk")
    levels_model, state = home("SweepLevel"), home("LevelState")
    records: dict[str, Any] = {}
    reader: dict[str, Any] = {}
    levels: dict[str, Any] = {}
    for sweep in sweeps:
        rows: dict[str, list[Any]] = {}
        if sweep.records_path:
            rows, reader[f"sweep {sweep.pk}"] = records_of(sweep)
            records.update(rows)
        for level in levels_model.objects.filter(sweep=sweep).order_by("index"):
            if level.state not in (state.COMPLETED, state.PARTIAL):
                continue
            key = level_key(sweep.pk, level.index, level.attempt)
            levels[key] = level_figures(sweep, level, rows.get(key, []))
    comparisons: dict[str, Any] = {}
    with home("records_read_once")():
        for experiment in home("Experiment").objects.order_by("pk"):
            stored = experiment.comparison or {}
            rebuilt = home("comparison_rebuilt")(
                experiment=experiment, with_schedule="schedule" in stored
            )
            comparisons[f"experiment {experiment.pk}"] = as_json(
                {"stored": stored, "rebuilt": rebuilt}
            )
    audit = home("audit_all")().as_dict()
    return {
        "records": records,
        "reader": reader,
        "levels": levels,
        "comparisons": comparisons,
        "audit": as_json(audit),
        "homes": dict(used),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "specdash.settings")
    sys.path.insert(0, os.getcwd())
    import django

    django.setup()
    args.out.write_text(json.dumps(figures(), sort_keys=True))


if __name__ == "__main__":
    main()
