"""A switch point's cost to the level just above it, predicted from the matrix.

The figures are the strict schedule check's quiet-machine run of 5 December 2026
(docs/measurement.md, "Where the switches go"): output tok/s as the docs print them, TPOT p50
and the accept length from the servers' counters as its stored levels hold them (means over
three sweeps), 32 output tokens a request. The verification then measured the schedule (K=1 at
batch 1, off from 2) at 0.974 (0.969-0.978) of "off" at C=2: 2.6% of the level's time.
"""

from __future__ import annotations

import pytest

from benchlib.stats.decision import Arm
from benchlib.stats.decision_matrix import MatrixVariant, decide_matrix
from benchlib.stats.schedule import Step
from benchlib.stats.switch_costs import CostVariant, StepEvidence, predict_switch_costs
from benchlib.stats.types import Curve, LevelSample

TOKENS = 32.0
# C -> (output tok/s, TPOT p50 ms, accept length from the counters)
QUIET = {
    "off": {1: (90.9, 10.80, 1.0), 2: (159.0, 12.09, 1.0), 4: (260.8, 14.60, 1.0),
            16: (502.9, 29.65, 1.0)},
    "K=1": {1: (101.8, 9.44, 1.722), 2: (157.7, 11.35, 1.687), 4: (239.5, 15.16, 1.693),
            16: (379.3, 37.66, 1.711)},
    "K=3": {1: (84.4, 11.36, 2.436), 2: (132.0, 13.18, 2.51), 4: (187.4, 18.54, 2.59),
            16: (270.0, 49.5, 2.56)},
}  # fmt: skip
DRAFTS = {"off": 0, "K=1": 1, "K=3": 3}
# Running batch sizes read once a second (the run's: C=1: 1; C=2: 2; C=4: 3-4; C=16: 12-16).
OBSERVED = {1: {1: 37}, 2: {2: 36, 1: 1}, 4: {4: 30, 3: 8}, 16: {16: 20, 14: 10, 12: 8}}


def evidence(name: str) -> dict[int, StepEvidence]:
    return {
        c: StepEvidence(tok_s, TOKENS, tpot, accept, "verify_counters")
        for c, (tok_s, tpot, accept) in QUIET[name].items()
    }


def cost_variant(name: str, **changes: dict[int, StepEvidence]) -> CostVariant:
    points = {c: figures[0] for c, figures in QUIET[name].items()}
    return CostVariant(name, DRAFTS[name], points, changes.get("evidence", evidence(name)))


SCHEDULE = (Step(1, 1, 1), Step(2, None, 0))


def test_the_quiet_run_at_c2_is_predicted_from_its_turnarounds_on_the_k1_step() -> None:
    variants = [cost_variant(n) for n in QUIET]
    (cost,) = predict_switch_costs(variants, SCHEDULE, [1, 2, 4, 16], margin=0.02)
    assert (cost.concurrency, cost.batch, cost.own, cost.turnaround) == (2, 1, "off", "K=1")
    # 159.0 / 32 completions a second, each waiting for a K=1 step at batch 1 (1.722 tokens
    # x 9.44 ms) instead of an off step (1 token x 10.80 ms).
    assert cost.completions_per_s == pytest.approx(4.969, abs=1e-3)
    assert cost.turnaround_step_ms == pytest.approx(16.26, abs=0.01)
    assert cost.own_step_ms == pytest.approx(10.80)
    assert cost.cost == pytest.approx(0.0271, abs=5e-4)
    # Measured: 0.974 (0.969-0.978); the prediction falls inside that interval.
    assert cost.predicted_ratio == pytest.approx(0.9736, abs=5e-4)
    assert cost.predicted_ratio is not None and 0.969 <= cost.predicted_ratio <= 0.978
    assert cost.trade_off
    ((gained_at, gain),) = cost.gains
    assert gained_at == 1 and gain == pytest.approx(101.8 / 90.9 - 1.0)
    assert cost.sentence == (
        "K=1 at batch 1 costs C=2 about 2.7% (its turnarounds run the K=1 step: 4.97 "
        "completions/s x 5.5 ms, steps at batch 1 K=1 16.3 ms, off 10.8 ms; predicted "
        "schedule / off 0.974 at C=2); C=1 gains 12.0%."
    )


def test_a_level_whose_turnarounds_run_its_own_variant_costs_nothing() -> None:
    variants = [cost_variant(n) for n in QUIET]
    # K=1 through batch 2 (as when C=2 holds K=1): C=2's turnarounds run K=1 as C=2 does, and
    # C=4's turnaround batch 3 runs off as C=4 does.
    held = (Step(1, 2, 1), Step(3, None, 0))
    assert predict_switch_costs(variants, held, [1, 2, 4, 16], margin=0.02) == ()


def test_a_switch_to_the_longer_step_above_is_a_gain_at_the_turnaround() -> None:
    variants = [cost_variant(n) for n in QUIET]
    (cost,) = predict_switch_costs(variants, (Step(1, 1, 0), Step(2, None, 1)), [1, 2], margin=0)
    assert (cost.own, cost.turnaround) == ("K=1", "off")
    assert cost.cost is not None and cost.cost < 0 and not cost.trade_off
    assert "costs C=2 nothing; it gains about" in cost.sentence


def test_missing_evidence_is_said_and_a_drafting_variant_needs_its_accept_length() -> None:
    no_accept = {
        c: StepEvidence(e.output_tok_s, e.tokens_per_request, e.tpot_ms, None)
        for c, e in evidence("K=1").items()
    }
    variants = [cost_variant("off"), cost_variant("K=1", evidence=no_accept)]
    (cost,) = predict_switch_costs(variants, SCHEDULE, [1, 2], margin=0.02)
    assert cost.cost is None and cost.predicted_ratio is None and not cost.trade_off
    assert "an amount not predicted (no accept length recorded for K=1 at C=1)" in cost.sentence
    # Without TPOT the per-stream rate is the level's output tok/s / C, and that is said; an
    # off variant without an accept length makes one token a step.
    bare = {
        c: StepEvidence(e.output_tok_s, e.tokens_per_request, None, None)
        for c, e in evidence("off").items()
    }
    variants = [cost_variant("off", evidence=bare), cost_variant("K=1")]
    (cost,) = predict_switch_costs(variants, SCHEDULE, [1, 2], margin=0.02)
    assert cost.own_step_ms == pytest.approx(1000.0 / 90.9)
    assert "off at C=1: no accept length recorded, one token a step" in cost.sentence
    assert "no TPOT, per-stream rate = output tok/s / C" in cost.sentence
    # A level at the turnaround batch that was not tested: nothing to read its step from.
    (cost,) = predict_switch_costs(
        [cost_variant("off"), cost_variant("K=1")], (Step(1, 3, 1), Step(4, None, 0)),
        [1, 2, 4], margin=0.02,
    )  # fmt: skip
    assert cost.concurrency == 4 and cost.cost is None
    assert "no K=1 level at C=3 to read its step from" in cost.sentence


def _matrix_variant(name: str) -> MatrixVariant:
    levels = [
        LevelSample.from_repeats(c, [v * 0.999, v, v * 1.001])
        for c, (v, _, _) in QUIET[name].items()
    ]
    arm = Arm(name, name, speculative=DRAFTS[name] > 0)
    return MatrixVariant(arm, Curve(name, levels), DRAFTS[name], evidence(name))


def test_the_matrix_decision_states_the_cost_and_calls_the_schedule_a_trade_off() -> None:
    d = decide_matrix([_matrix_variant(n) for n in QUIET], margin=0.0, observed=OBSERVED)
    assert [(s.start, s.end, s.draft_length) for s in d.steps] == [(1, 1, 1), (2, None, 0)]
    (cost,) = d.switch_costs
    assert cost.concurrency == 2 and cost.predicted_ratio == pytest.approx(0.9736, abs=5e-4)
    # Said once, among the statements every surface prints, before where the switches come
    # from; the recommendation says what the schedule trades.
    assert d.statements()[-2] == cost.sentence
    assert d.statements()[-1] == d.thresholds
    assert d.recommendation.startswith("Schedule: C=1 K=1; C=2 and above off")
    assert d.recommendation.endswith(
        "This is a trade-off, not a schedule never behind a fixed choice (cost above the 0% "
        "margin): C=2 is predicted about 2.7% behind off for C=1's 12.0%."
    )
    as_dict = d.to_dict()
    assert as_dict["switch_costs"][0]["predicted_ratio"] == cost.predicted_ratio
    assert cost.sentence in as_dict["statements"]


def test_a_cost_within_the_margin_is_stated_but_no_trade_off() -> None:
    # At the dashboard's 2% margin a 1% cost is said, and the recommendation stays as it was.
    cheap = {c: StepEvidence(e.output_tok_s, e.tokens_per_request, 10.8 / 1.722 * 1.2, 1.722)
             for c, e in evidence("K=1").items()}  # fmt: skip
    variants = [_matrix_variant("off"), _matrix_variant("K=1"), _matrix_variant("K=3")]
    variants[1] = MatrixVariant(variants[1].arm, variants[1].curve, 1, cheap)
    d = decide_matrix(variants, margin=0.02, observed=OBSERVED)
    (cost,) = d.switch_costs
    assert cost.cost == pytest.approx(4.969 * 2.16e-3, abs=2e-4) and not cost.trade_off
    assert "trade-off" not in d.recommendation
    assert cost.sentence in d.statements()
    # Without step evidence (a matrix of bare figures) nothing is predicted, and nothing said.
    bare = [MatrixVariant(v.arm, v.curve, v.draft_length) for v in variants]
    d = decide_matrix(bare, margin=0.02, observed=OBSERVED)
    assert d.switch_costs[0].cost is None
