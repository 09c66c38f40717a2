"""The comparison ``perf/bench_structure.py`` prints: two trees' figures of the same data
(``perf/structure_figures.py``'s JSON), leaf by leaf and exactly, one row an item.

A leaf is equal when its JSON text is (a float's ``repr`` is its bits); a difference is listed
by its path, with its relative difference where both are numbers, and each row keeps its
largest. Plain Python: no Django, no access to either tree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Tally:
    """One row of the table: items equal and different, and what differed."""

    equal: int = 0
    different: int = 0
    notes: list[str] = field(default_factory=list)
    max_rel: float = 0.0

    def add(self, where: str, a: Any, b: Any) -> None:
        """Leaf by leaf, exact (the JSON text of each); a path on one side only differs."""
        left, right = dict(leaves(a)), dict(leaves(b))
        for path in sorted(set(left) | set(right)):
            self.leaf(f"{where} {path}", left.get(path, MISSING), right.get(path, MISSING))

    def add_stored(self, where: str, stored: Any, fresh: Any) -> int:
        """A stored figure against the recomputed one, on the leaves that both have or the
        recomputed one has; returns how many stored leaves nothing recomputes (the clock
        anchor, the client's own health, the status: not figures of the records)."""
        left, right = dict(leaves(stored)), dict(leaves(fresh))
        for path in sorted(right):
            self.leaf(f"{where} {path}", left.get(path, MISSING), right[path])
        return len(set(left) - set(right))

    def leaf(self, name: str, x: Any, y: Any) -> None:
        if x is not MISSING and y is not MISSING and json.dumps(x) == json.dumps(y):
            self.equal += 1
            return
        self.different += 1
        rel = relative(x, y)
        if rel is not None:
            self.max_rel = max(self.max_rel, rel)
        self.notes.append(f"{name}: {x!r} against {y!r}" + (f" (rel {rel:.3g})" if rel else ""))


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


MISSING: Any = _Missing()


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every scalar by its path (an empty dict or list is a leaf of its own)."""
    if isinstance(value, dict) and value:
        for key in sorted(value):
            yield from leaves(value[key], f"{path}.{key}" if path else str(key))
    elif isinstance(value, list) and value:
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")
    else:
        yield path, value


def relative(a: Any, b: Any) -> float | None:
    """|a - b| / max(|a|, |b|) of two numbers; None where either is not one."""
    if isinstance(a, bool) or isinstance(b, bool):
        return None
    if not (isinstance(a, int | float) and isinstance(b, int | float)):
        return None
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else abs(a - b) / scale


VERDICT_WORDS = ("verdict", "decision", "recommendation", "statement", "status")


@dataclass
class Table:
    """The rows of one direction (the data of one tree, figures by both)."""

    records: Tally = field(default_factory=Tally)
    summaries: Tally = field(default_factory=Tally)
    columns: Tally = field(default_factory=Tally)
    server: Tally = field(default_factory=Tally)
    comparison: Tally = field(default_factory=Tally)
    verdicts: Tally = field(default_factory=Tally)
    audit: Tally = field(default_factory=Tally)
    stored_summaries: Tally = field(default_factory=Tally)
    stored_server: Tally = field(default_factory=Tally)
    stored_comparison: Tally = field(default_factory=Tally)
    stored_verdicts: Tally = field(default_factory=Tally)
    reader: Tally = field(default_factory=Tally)
    # Stored leaves that nothing recomputes from the records (anchor, client health, status).
    not_recomputed: int = 0

    def rows(self) -> list[tuple[str, Tally]]:
        return [
            ("records (as read, one a record)", self.records),
            ("records files (reader's findings)", self.reader),
            ("level summary fields: recomputed", self.summaries),
            ("level summary fields: stored", self.stored_summaries),
            ("level columns: stored, recomputed", self.columns),
            ("server figures: recomputed", self.server),
            ("server figures: stored", self.stored_server),
            ("comparison fields: rebuilt", self.comparison),
            ("comparison fields: stored", self.stored_comparison),
            ("verdict / decision fields: rebuilt", self.verdicts),
            ("verdict / decision fields: stored", self.stored_verdicts),
            ("audit outcome", self.audit),
        ]


def tabulate(produced: dict[str, Any], other: dict[str, Any]) -> Table:
    """``produced``: the figures the producing tree computes from its own data; ``other``:
    those the other tree computes from the same data."""
    table = Table()
    for key in sorted(set(produced["records"]) | set(other["records"])):
        mine, theirs = produced["records"].get(key, []), other["records"].get(key, [])
        if len(mine) != len(theirs):
            table.records.different += 1
            table.records.notes.append(f"{key}: {len(mine)} records against {len(theirs)}")
            continue
        for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            if json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True):
                table.records.equal += 1
            else:
                table.records.different += 1
                probe = Tally()
                probe.add(f"{key} record {i}", a, b)
                table.records.notes += probe.notes
    table.reader.add("reader", produced["reader"], other["reader"])
    for key in sorted(set(produced["levels"]) | set(other["levels"])):
        a, b = produced["levels"].get(key, {}), other["levels"].get(key, {})
        table.summaries.add(key, a.get("recomputed summary"), b.get("recomputed summary"))
        table.not_recomputed += table.stored_summaries.add_stored(
            key, a.get("stored summary"), b.get("recomputed summary")
        )
        for part in ("stored columns", "recomputed columns"):
            table.columns.add(f"{key} {part}", a.get(part), b.get(part))
        # Stored against recomputed on the columns the level audit holds (the state and the
        # whole summary also hang on what the records do not keep: the level's status).
        audited = a.get("audited columns") or []
        table.columns.add(
            f"{key} stored/recomputed",
            {k: (a.get("stored columns") or {}).get(k, MISSING) for k in audited},
            {k: (b.get("recomputed columns") or {}).get(k, MISSING) for k in audited},
        )
        table.server.add(key, a.get("server"), b.get("server"))
        table.not_recomputed += table.stored_server.add_stored(
            key, a.get("stored server"), b.get("server")
        )
    for key in sorted(set(produced["comparisons"]) | set(other["comparisons"])):
        a, b = produced["comparisons"].get(key, {}), other["comparisons"].get(key, {})
        # When it was built is not a figure (the comparison audit leaves it out too).
        stored, mine, theirs = (
            {k: v for k, v in (c or {}).items() if k != "built_at"}
            for c in (a.get("stored"), a.get("rebuilt"), b.get("rebuilt"))
        )
        for rows, label, x, y in (
            ((table.comparison, table.verdicts), "rebuilt", mine, theirs),
            ((table.stored_comparison, table.stored_verdicts), "stored/rebuilt", stored, theirs),
        ):
            left, right = dict(leaves(x)), dict(leaves(y))
            for path in sorted(set(left) | set(right)):
                row = rows[1] if any(w in path for w in VERDICT_WORDS) else rows[0]
                row.leaf(
                    f"{key} {label}: {path}", left.get(path, MISSING), right.get(path, MISSING)
                )
    table.audit.add("audit", produced["audit"], other["audit"])
    if not produced["audit"].get("ok"):
        table.audit.different += 1
        table.audit.notes.append(f"the audit found problems: {produced['audit'].get('problems')}")
    return table


def print_table(title: str, table: Table) -> None:
    print(f"\n{title}")
    print(f"  {'item':<38} {'equal':>8} {'different':>10}")
    for name, tally in table.rows():
        print(f"  {name:<38} {tally.equal:>8} {tally.different:>10}")
    for name, tally in table.rows():
        for note in tally.notes[:40]:
            print(f"    DIFFERENT {name}: {note}")
        if len(tally.notes) > 40:
            print(f"    ... and {len(tally.notes) - 40} more in {name}")
        if tally.max_rel:
            print(f"    {name}: largest relative difference {tally.max_rel:.3g}")
    print(
        f"  (not compared) {table.not_recomputed} stored summary and server leaves that "
        "nothing recomputes from the records (clock anchor, client health, status)"
    )
