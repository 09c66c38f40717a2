"""The sentences of a decision: each level's, each band's, the recommendation, the summary and
the "why" line, written from the statuses the rule (``decision_rule``) gave.

Apart from the rule because the words are what every surface prints and the statements test
reads (tests/fixtures/statements.py): one place says how a status, a band or a trade-off is put,
and the rule above it only decides.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchlib.stats.decision import (
    WITHIN_RUN,
    Action,
    Arm,
    Band,
    Figure,
    LevelDecision,
    LevelEvidence,
    Status,
    conditions,
)
from benchlib.stats.engines import EngineOption, option_names, speculation_switches
from benchlib.stats.intervals import is_within_run
from benchlib.stats.types import Ratio

STATUS_WORDS: dict[Status, str] = {
    "ahead": "ahead",
    "behind": "behind",
    "equivalent": "equivalent",
    "inconclusive": "inconclusive",
    "not_comparable": "not comparable",
}


ACTION_WORDS: dict[Action, str] = {
    "on": "speculation on",
    "off": "speculation off",
    "none": "no recommendation yet",
}


def ratio_text(ratio: Ratio, figure: Figure) -> str:
    how = "" if figure.higher_is_better else f" ({figure.label} lower is better: A/B)"
    text = f"{figure.label} {ratio.point:.3f}x{how}"
    if ratio.low is not None and ratio.high is not None:
        text += f", {ratio.confidence:.0%} interval {ratio.low:.3f}-{ratio.high:.3f}x"
    return text


def level_sentence(
    c: int,
    status: Status,
    reason: str,
    ratio: Ratio,
    repeats: int,
    candidate: Arm,
    figure: Figure,
    margin: float,
) -> str:
    runs = f"{repeats} run{'s' if repeats != 1 else ''} per arm"
    body = f"C={c}: {candidate.title} {STATUS_WORDS[status]} ({reason}): "
    body += f"{ratio_text(ratio, figure)}; {runs}; {conditions(margin, ratio.confidence)}"
    if is_within_run(ratio.method):
        body += f"; {WITHIN_RUN}"
    return body + "."


def span(start: int, end: int | None) -> str:
    if end is None:
        return f"C={start} and above"
    return f"C={start}" if start == end else f"C={start}-{end}"


def recommendation_sentence(
    bands: Sequence[Band], spec: Arm | None, cond: str
) -> tuple[str, tuple[EngineOption, ...]]:
    if spec is None:
        return "No speculation recommendation: both arms speculate or neither does.", ()
    if not bands:
        return "No recommendation yet: no level was tested by both arms.", ()
    actions = [band.action for band in bands]
    names = option_names(spec.engine)
    see = f" ({names})" if names else ""
    if actions == ["on"]:
        return (
            f"Recommendation: keep speculation on ({spec.title}) at every tested level{see}; "
            f"{cond}.",
            (),
        )
    if actions == ["off"]:
        return f"Recommendation: serve without speculation ({spec.title}){see}; {cond}.", ()
    if actions == ["on", "off"] and bands[0].end is not None:
        options = speculation_switches(bands[0].end, spec.engine)
        written = "; ".join(f"{o.engine} {o.value}" for o in options)
        return (
            f"Recommendation: speculation ({spec.title}) on up to C={bands[0].end}, off above "
            f"({written}); {cond}.",
            options,
        )
    if "none" in actions and "on" not in actions and "off" not in actions:
        return f"No recommendation yet: no level is conclusive{see}; {cond}.", ()
    parts = "; ".join(f"{span(b.start, b.end)} {ACTION_WORDS[b.action]}" for b in bands)
    return f"Recommendation by band ({spec.title}){see}: {parts}; {cond}.", ()


def change_words(cand: float, ref: float, what: str) -> str:
    """How the candidate's latency compares with the reference's, in words."""
    ratio = cand / ref
    if ratio >= 1.5:
        return f"{what} is {ratio:.1f}x higher"
    if round(ratio, 2) > 1.0:
        return f"{what} is {ratio - 1:.0%} higher"
    if round(ratio, 2) < 1.0:
        return f"{what} is {1 - ratio:.0%} lower"
    return f"{what} is equal (within 0.5%)"


def why_sentence(
    evidence: Sequence[LevelEvidence],
    decided: Sequence[LevelDecision],
    reference: Arm,
    candidate: Arm,
    figure: Figure,
) -> str:
    """The trade-off in one line: at the lowest level with both arms' latencies, the
    candidate's ITL and TTFT p50 against the reference's, then where the deciding figure turns
    (the last *ahead* level before the first *behind* one, by the statuses)."""
    found = next(
        (
            ev
            for ev in sorted(evidence, key=lambda e: e.concurrency)
            if ev.latency is not None
            and all(
                isinstance(side.get(key), int | float) and (side.get(key) or 0) > 0
                for side in ev.latency
                for key in ("itl_p50_ms", "ttft_p50_ms")
            )
        ),
        None,
    )
    if found is None or found.latency is None:
        return ""
    ref, cand = found.latency
    parts = [
        change_words(float(cand[key] or 0), float(ref[key] or 0), label)
        for key, label in (("itl_p50_ms", "ITL p50"), ("ttft_p50_ms", "TTFT p50"))
    ]
    text = (
        f"Why: at C={found.concurrency} against {reference.title}, {candidate.title}'s "
        f"{parts[0]} and its {parts[1]}"
    )
    ahead = [lv.concurrency for lv in decided if lv.status == "ahead"]
    behind = [lv.concurrency for lv in decided if lv.status == "behind"]

    def at(levels: Sequence[int]) -> str:
        return ", ".join(f"C={c}" for c in levels)

    if ahead and behind and max(ahead) < min(behind):
        text += (
            f"; on {figure.label} it is ahead up to C={max(ahead)} and behind from C={min(behind)}"
        )
    elif ahead or behind:
        shown = [f"ahead at {at(ahead)}"] if ahead else []
        shown += [f"behind at {at(behind)}"] if behind else []
        text += f"; on {figure.label} it is {' and '.join(shown)}"
    else:
        text += f"; on {figure.label} no level is shown ahead or behind"
    return text + "."


def summary_sentence(
    levels: Sequence[LevelDecision],
    reference: Arm,
    candidate: Arm,
    figure: Figure,
    rate_mode: bool,
    cond: str,
) -> str:
    head = f"{candidate.title} against {reference.title} on {figure.label}"
    if rate_mode:
        head += " (fixed request rate: throughput is the offered rate, so it does not decide)"
    if not levels:
        return f"{head}: no level was tested by both arms."
    parts = []
    for status in ("ahead", "behind", "equivalent", "inconclusive", "not_comparable"):
        at = [f"C={lv.concurrency}" for lv in levels if lv.status == status]
        if at:
            parts.append(f"{STATUS_WORDS[status]} at {', '.join(at)}")
    text = f"{head}: {'; '.join(parts)} ({cond})"
    if any(lv.within_run for lv in levels):
        text += f"; {WITHIN_RUN}"
    return text + "."
