"""What ``bench_tuning`` prints: the matrix, the schedule with the engines' configurations, the
verification per level with its verdict, and the tuned arm beside the scenario's figures.
Django-free: it reads the API's JSON answers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# The scenario's figures the simulator is calibrated to (benchlib/simulator/profiles.py).
EAGLE3_SINGLE_STREAM = 96.1  # decode tok/s of one stream, EAGLE-3 (3 draft steps)
BASELINE_SATURATED = 773.0  # aggregate output tok/s at 256 running, no speculation
SATURATED_FROM = 200  # a top level from which the saturated figure is compared
EAGLE3_STEPS = 3  # the seeded EAGLE-3 profile's draft length: the arm that is "EAGLE-3"


def say(text: str = "") -> None:
    print(text, flush=True)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        say("  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))


def _num(value: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def _short(name: str) -> str:
    """ "Simulated SGLang EAGLE-3 [K=3]" -> "K=3"."""
    return name.rsplit("[", 1)[-1].rstrip("]") if name.endswith("]") else name


def figures(comparison: dict[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    """Per series name, per concurrency: the comparison's level row (output_tok_s, ...)."""
    return {
        s["name"]: {int(row["concurrency"]): row for row in s["levels"]}
        for s in comparison["series"]
    }


def print_matrix(comparison: dict[str, Any]) -> None:
    by_name = figures(comparison)
    names = list(by_name)
    levels = sorted({c for rows in by_name.values() for c in rows})
    say("Matrix: output tok/s per variant and level")
    rows = [
        [str(c), *(_num(by_name[n].get(c, {}).get("output_tok_s")) for n in names)] for c in levels
    ]
    table(["C", *(_short(n) for n in names)], rows)


def print_schedule(schedule: dict[str, Any]) -> None:
    say("Schedule")
    if not schedule["available"]:
        say(f"  none: {schedule['message']}")
        return
    say(f"  {schedule['description']}")
    rows = []
    for band in schedule["bands"]:
        end = "" if band["end"] is None else str(band["end"])
        gain = band["expected_gain"]
        interval = (
            f"{band['gain_low']:.3f}-{band['gain_high']:.3f}"
            if band["gain_low"] is not None and band["gain_high"] is not None
            else "-"
        )
        rows.append([
            f"{band['start']}..{end}", _short(band["variant"]), str(band["draft_length"]),
            ",".join(map(str, band["levels"])), _num(gain, "{:.3f}x"), interval,
            ",".join(dict.fromkeys(_short(v) for v in band["runner_up"])),
        ])  # fmt: skip
    table(["C band", "variant", "K", "levels tested", "gain", "gain interval", "over"], rows)
    if schedule["untested"]:
        say(f"  untested levels: {schedule['untested']}")
    for config in schedule.get("configs", []):
        exact = "exact" if config["exact"] else "approximate"
        say(f"  {config['engine']} ({config['option']}, {exact}; {config['source']}):")
        value = config["value"]
        if value:
            say("    " + (value if isinstance(value, str) else " ".join(value)))
        if config.get("file_name"):
            say(f"    {config['file_name']}:")
            for line in str(config["file_text"]).splitlines():
                say(f"      {line}")
        if config.get("note"):
            say(f"    note: {config['note']}")


def print_verification(report: dict[str, Any]) -> None:
    say(f"Verification: {_short(report['tuned'])} vs every fixed variant")
    rows = []
    for level in report["levels"]:
        ratio = level["ratio"]
        interval = (
            f"{ratio['low']:.3f}-{ratio['high']:.3f}"
            if ratio["low"] is not None and ratio["high"] is not None
            else "none"
        )
        behind = ",".join(map(_short, level["conclusively_worse_than"]))
        close = ",".join(map(_short, level.get("behind_within_margin", [])))
        rows.append([
            str(level["concurrency"]), _num(level["tuned"]), _short(level["best_fixed"]),
            _num(level["best_fixed_value"]), f"{ratio['point']:.3f}", interval, ratio["method"],
            (f"within margin {close}" if close else "ok") if level["ok"] else f"behind {behind}",
        ])  # fmt: skip
    table(
        [
            "C",
            "tuned",
            "best fixed",
            "its tok/s",
            "ratio",
            f"{report['confidence']:.0%}",
            "from",
            "",
        ],
        rows,
    )
    say(
        f"  margin: {report['margin']:.0%} (a fixed variant is ahead only where tuned is behind "
        "it: wholly below 1, not inside 1 ± margin)"
    )
    say(f"  verdict: {report['verdict']}")


def print_targets(comparison: dict[str, Any], report: dict[str, Any]) -> None:
    """The tuned arm beside the scenario's two figures and the arms standing for them here:
    the fixed K=3 arm (the seeded EAGLE-3 profile's draft length) at the lowest level, and the
    off arm (the baseline's server) at the highest."""
    by_name = figures(comparison)
    tuned = by_name[report["tuned"]]
    fixed = {_short(n): rows for n, rows in by_name.items() if n != report["tuned"]}
    low, high = min(tuned), max(tuned)
    say("The tuned arm against the scenario's figures")

    def decode(row: dict[str, Any]) -> float | None:
        tpot = row.get("tpot_p50_ms")
        return 1000.0 / tpot if tpot else None

    eagle = fixed.get(f"K={EAGLE3_STEPS}", {}).get(low, {})
    off = fixed.get("off", {}).get(high, {})
    # The saturated figure is at 256 running: a top level far below it is not saturation.
    saturated = BASELINE_SATURATED if high >= SATURATED_FROM else None
    lines = [
        (f"C={low} decode tok/s (1000/TPOT p50)", decode(tuned[low]), EAGLE3_SINGLE_STREAM,
         "EAGLE-3 single stream", decode(eagle) if eagle else None, f"K={EAGLE3_STEPS}"),
        (f"C={low} output tok/s", tuned[low].get("output_tok_s"), None, "",
         eagle.get("output_tok_s"), f"K={EAGLE3_STEPS}"),
        (f"C={high} output tok/s", tuned[high].get("output_tok_s"), saturated,
         "baseline saturated (256 running)", off.get("output_tok_s"), "off"),
    ]  # fmt: skip
    for what, value, scenario, scenario_name, arm_value, arm in lines:
        parts = [f"  {what}: tuned {_num(value)}"]
        if scenario is not None and value is not None:
            verdict = ">=" if value >= scenario else "<"
            parts.append(
                f"{verdict} scenario {scenario} ({scenario_name}, {value / scenario:.3f}x)"
            )
        if arm_value is not None and value is not None:
            verdict = ">=" if value >= arm_value else "<"
            parts.append(
                f"{verdict} this run's {arm} arm {arm_value:.1f} ({value / arm_value:.3f}x)"
            )
        say("; ".join(parts))
