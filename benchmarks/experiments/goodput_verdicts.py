"""A comparison's goodput verdicts: each candidate against the reference again, on goodput
tok/s under the experiment's SLOs instead of raw throughput, each opening with where each side
meets the SLOs.

Apart from the comparison (comparison.py), which builds them only when the experiment sets
SLOs: the same verdict and decision as the throughput ones, on other curves and one more line.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchlib.loadgen.goodput import Slo
from benchlib.stats.verdict import compare_all
from benchmarks.experiments import workload
from benchmarks.experiments.candidate_decision import CONFIDENCE, candidate_decision
from benchmarks.experiments.level_runs import SeriesCurve, by_concurrency
from benchmarks.experiments.verdicts import VerdictEntry, advice_fields, verdict_entry


def _slo_phrase(slo: Slo) -> str:
    names = {
        "ttft_ms": "TTFT",
        "tpot_ms": "TPOT",
        "itl_ms": "mean ITL",
        "max_gap_ms": "longest gap",
        "e2e_ms": "E2E",
    }
    scope = " p99" if slo.scope == "p99" else ""
    limits = ", ".join(f"{names[k]}{scope} <= {v:g} ms" for k, v in slo.limits().items())
    if slo.scope == "request":
        limits += f" for {slo.attainment:.0%} of requests"
    return limits


def _reach(label: str, name: str, highest: int | None) -> str:
    where = "at no tested level" if highest is None else f"up to C={highest}"
    return f"{name} ({label}) meets them {where}"


def goodput_verdicts(
    built: Sequence[SeriesCurve],
    reach: dict[str, int | None],
    slo: Slo,
    *,
    rate_mode: bool,
) -> list[VerdictEntry]:
    """The verdicts again, on goodput tok/s under the SLO instead of raw throughput, each
    opening with where each side meets the SLO."""
    curves = [
        workload.goodput_curve(curve.name, curve.speculative, by_concurrency(data.runs), slo)
        for data, curve, _ in built
    ]
    labels = {curve.name: data.label for data, curve, _ in built}
    ref_data = built[0][0]
    out = []
    for (data, _, _), curve in zip(built[1:], curves[1:], strict=True):
        head = (
            f"Under the SLOs ({_slo_phrase(slo)}): "
            f"{_reach(ref_data.label, ref_data.name, reach[ref_data.label])}; "
            f"{_reach(data.label, data.name, reach[data.label])}."
        )
        if curves[0].levels and curve.levels:
            verdict = compare_all(curves[0], [curve], confidence=CONFIDENCE)[0]
            entry = verdict_entry(verdict, labels)
            decision = candidate_decision(
                built[0][0], data, verdict.ratios, "goodput_tok_s", rate_mode
            )
            advice_fields(decision, entry)
            entry["text"] = " ".join((head, *decision.statements()))
        else:
            empty = data.name if not curve.levels else ref_data.name
            entry = VerdictEntry(
                {
                    "reference": ref_data.label,
                    "candidate": data.label,
                    "reference_name": ref_data.name,
                    "candidate_name": data.name,
                    "ratios": [],
                    "text": f"{head} {empty} delivers no goodput at any tested level.",
                }
            )
        out.append(entry)
    return out
