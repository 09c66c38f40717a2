from __future__ import annotations

import pytest

from benchlib.stats.engines import describe
from benchlib.stats.types import Curve, LevelSample
from benchlib.stats.verdict import compare, compare_all
from tests.benchlib.stats.synthetic import closed_loop_requests

# scenario.md: EAGLE-3 on CUDA 13, single stream 96.1 tok/s (baseline 92.6); the sweep's
# C=10 level was not measured (interpolated ~240). The baseline curve is constructed: ahead
# from C=2 on, saturating at ~773 tok/s.
EAGLE3 = {1: 96.1, 2: 125.1, 5: 183.2, 10: 240.0, 30: 299.5, 70: 337.7, 100: 340.0, 250: 354.0}
BASELINE = {1: 92.6, 2: 176.0, 5: 380.0, 10: 540.0, 30: 690.0, 70: 750.0, 100: 765.0, 250: 773.0}


@pytest.fixture
def scenario():
    baseline = Curve.from_values("baseline", BASELINE)
    eagle3 = Curve.from_values("EAGLE-3", EAGLE3, speculative=True)
    return baseline, eagle3


def test_scenario_verdict_fields(scenario):
    baseline, eagle3 = scenario
    v = compare(baseline, eagle3)
    assert v.first is not None
    assert v.top is not None
    assert v.first.concurrency == 1
    assert v.first.ratio.point == pytest.approx(96.1 / 92.6)
    assert v.behind_from == 2
    assert v.ahead_from is None
    assert v.top.concurrency == 250
    assert 1 / v.top.ratio.point == pytest.approx(2.18, abs=0.005)
    assert v.crossover.last is not None
    assert 1 < v.crossover.last.concurrency < 2
    assert v.disable_speculation_above == 1
    assert v.reference_saturation.throughput == 773
    assert v.candidate_saturation.throughput == 354
    assert v.saturation_ratio == pytest.approx(354 / 773)
    engines = {option.engine for option in v.engine_options}
    # Curves without an engine (the simulator's, a custom server's) get every engine's options.
    assert engines == {"llama.cpp", "vLLM", "TensorRT-LLM", "SGLang"}


def test_scenario_engine_options(scenario):
    baseline, eagle3 = scenario
    text = describe(compare(baseline, eagle3).engine_options)
    assert "num_speculative_tokens_per_batch_size=[[1, 1, K], [2, MAX_NUM_SEQS, 0]]" in text
    # Removed from vLLM (it refuses to start with it): never recommended.
    assert "disable_by_batch_size" not in text
    assert "TensorRT-LLM max_concurrency=1" in text
    assert 'SGLang --speculative-adaptive --speculative-adaptive-config FILE.json with {"1"' in text
    assert '"2": {"candidate_steps": [0]}' in text


@pytest.mark.parametrize(
    ("engine", "names", "expected"),
    [
        ("llamacpp", {"llama.cpp"}, "llama.cpp --spec-type none on the server for loads above C=1"),
        ("vllm", {"vLLM"}, "vLLM num_speculative_tokens_per_batch_size=[[1, 1, K]"),
        ("sglang", {"SGLang"}, "SGLang --speculative-adaptive"),
    ],
)
def test_the_recommendation_names_the_options_of_the_engine_under_test(engine, names, expected):
    baseline = Curve.from_values("baseline", BASELINE, engine=engine)
    spec = Curve.from_values("spec", EAGLE3, speculative=True, engine=engine)
    v = compare(baseline, spec)
    assert {o.engine for o in v.engine_options} == names
    assert expected in describe(v.engine_options)
    assert all(o.source.startswith("https://github.com/") and o.version for o in v.engine_options)


def test_the_engine_options_table_has_a_source_and_version_for_every_row():
    from benchlib.stats.engines import ENGINE_NAMES, ENGINE_OPTIONS

    assert {row.engine for row in ENGINE_OPTIONS} == set(ENGINE_NAMES)
    for row in ENGINE_OPTIONS:
        assert row.option in row.syntax  # what to write names the option
        assert row.source.startswith("https://github.com/") and row.version
        assert "disable_by_batch_size" not in row.syntax
    load_switches = {row.engine for row in ENGINE_OPTIONS if row.switches_by_load}
    assert load_switches == {"vllm", "sglang", "trtllm"}  # llama.cpp has none


def test_the_recommendation_holds_when_the_speculative_profile_is_the_reference(scenario):
    baseline, eagle3 = scenario
    v = compare(eagle3, baseline)
    assert v.disable_speculation_above == 1
    assert v.ahead_from == 2 and v.first is not None
    assert v.first.ratio.point == pytest.approx(92.6 / 96.1)


def test_speculation_ahead_everywhere_keeps_it_on():
    base = Curve.from_values("base", {1: 90.0, 8: 500.0})
    spec = Curve.from_values("spec", {1: 120.0, 8: 520.0}, speculative=True)
    v = compare(base, spec)
    assert v.disable_speculation_above is None
    assert v.engine_options == ()
    assert v.crossover.last is None
    assert v.ahead_from == 1


def test_speculation_behind_everywhere_says_serve_without_it():
    base = Curve.from_values("base", {1: 100.0, 8: 500.0})
    spec = Curve.from_values("spec", {1: 95.0, 8: 300.0}, speculative=True)
    v = compare(base, spec)
    assert v.disable_speculation_above == 0
    assert v.crossover.reason == "spec is behind base at every tested level (C=1..8)"


def test_two_profiles_without_speculation_get_no_speculation_advice():
    a = Curve.from_values("a", {1: 100.0, 8: 500.0})
    b = Curve.from_values("b", {1: 105.0, 8: 450.0})
    v = compare(a, b)
    assert v.disable_speculation_above is None
    assert v.engine_options == ()


def test_more_than_two_profiles_are_each_compared_with_the_reference(scenario):
    baseline, eagle3 = scenario
    ngram = Curve.from_values("ngram", {c: v * 0.9 for c, v in BASELINE.items()}, speculative=True)
    verdicts = compare_all(baseline, [eagle3, ngram])
    assert [(v.reference, v.candidate) for v in verdicts] == [
        ("baseline", "EAGLE-3"),
        ("baseline", "ngram"),
    ]
    assert verdicts[1].disable_speculation_above == 0


def _request_curve(name, rates, *, speculative=False, seed=0):
    levels = [
        LevelSample.from_requests(
            c, closed_loop_requests(concurrency=c, per_slot=6, tok_per_s=r, seed=seed + c)
        )
        for c, r in rates.items()
    ]
    return Curve(name, levels, speculative=speculative)


def test_verdict_from_request_data_has_intervals_and_is_deterministic():
    base = _request_curve("base", {1: 90.0, 2: 88.0, 4: 85.0}, seed=0)
    spec = _request_curve("spec", {1: 110.0, 2: 80.0, 4: 60.0}, speculative=True, seed=100)
    first = compare(base, spec)
    again = compare(base, spec)
    assert first == again
    assert all(lvl.ratio.method == "batch-means-log-t" for lvl in first.ratios.levels)
    last = first.crossover.last
    assert last is not None
    assert last.has_interval
    assert first.disable_speculation_above == 1


def test_profiles_without_a_common_level_have_no_first_level():
    v = compare(Curve.from_values("a", {1: 10.0}), Curve.from_values("b", {2: 10.0}))
    assert v.first is None
    assert v.crossover.last is None
