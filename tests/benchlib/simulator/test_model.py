from __future__ import annotations

import random

import pytest

from benchlib.simulator.model import (
    TokenDraw,
    emitted_distribution,
    expected_steps,
    predict_closed_loop,
)
from benchlib.simulator.profiles import PROFILES
from benchlib.simulator.scheduler import SchedulerCore, SimRequest
from benchlib.simulator.virtual import simulate_closed_loop

BASELINE, EAGLE3 = PROFILES["baseline"], PROFILES["eagle3"]


def _decode_rate(profile, batch):
    return batch * profile.tokens_per_step() / profile.step_seconds(batch)


def test_baseline_single_stream_and_cap_match_the_scenario():
    assert _decode_rate(BASELINE, 1) == pytest.approx(92.6, rel=1e-3)
    assert _decode_rate(BASELINE, BASELINE.max_running) == pytest.approx(773, rel=2e-3)


def test_eagle3_single_stream_and_cap_match_the_scenario():
    assert _decode_rate(EAGLE3, 1) == pytest.approx(96.1, rel=1e-3)
    assert _decode_rate(EAGLE3, EAGLE3.max_running) == pytest.approx(354, rel=2e-3)


def test_eagle3_leads_at_one_stream_and_trails_from_two_on():
    assert _decode_rate(EAGLE3, 1) > _decode_rate(BASELINE, 1)
    for c in (2, 5, 10, 30, 70, 100, 250):
        assert _decode_rate(EAGLE3, c) < _decode_rate(BASELINE, c)
    # Baseline is more than 2x ahead at high concurrency, as in the scenario.
    assert _decode_rate(BASELINE, 250) > 2 * _decode_rate(EAGLE3, 250)


def test_eagle3_curve_has_the_scenario_shape():
    rates = [_decode_rate(EAGLE3, c) for c in (1, 2, 5, 30, 70, 100, 250)]
    assert rates == sorted(rates)
    # Within 30% of the measured sweep, whose small-C figures include client overhead.
    for measured, model in zip((77.5, 125.1, 183.2, 299.5, 337.7, 340, 354), rates, strict=True):
        assert model == pytest.approx(measured, rel=0.3)


def test_accept_distribution_has_the_profile_mean():
    probs = emitted_distribution(EAGLE3.accept_length, EAGLE3.spec_steps)
    assert sum(probs) == pytest.approx(1.0)
    assert sum(n * p for n, p in enumerate(probs, start=1)) == pytest.approx(2.6, rel=1e-6)
    draw = TokenDraw(EAGLE3, random.Random(1))
    values = [draw.draw() for _ in range(40000)]
    assert set(values) <= {1, 2, 3, 4}
    assert sum(values) / len(values) == pytest.approx(2.6, rel=0.02)


def test_expected_steps_baseline_is_one_per_token():
    assert expected_steps(BASELINE, 100) == 100
    # The first token comes from prefill alone; the other 99 from verify steps.
    assert 1 + 99 / 2.6 < expected_steps(EAGLE3, 100) < 1 + 99 / 2.6 + 1


@pytest.mark.parametrize("profile", [BASELINE, EAGLE3], ids=lambda p: p.name)
@pytest.mark.parametrize("concurrency", [1, 256, 400])
def test_virtual_clock_throughput_matches_the_formula(profile, concurrency):
    predicted = predict_closed_loop(profile, concurrency, prompt_tokens=32, output_tokens=64)
    run = simulate_closed_loop(
        profile, concurrency, prompt_tokens=32, output_tokens=64, duration_s=400, warmup_s=50
    )
    assert run.output_tok_s == pytest.approx(predicted.output_tok_s, rel=0.02)
    if concurrency >= profile.max_running:
        # Saturated: the batch cap, not the clients, sets the rate.
        assert predicted.running == profile.max_running


def test_virtual_eagle3_chunks_carry_accept_length_tokens():
    run = simulate_closed_loop(EAGLE3, 4, prompt_tokens=8, output_tokens=4096, duration_s=60)
    assert run.mean_tokens_per_chunk == pytest.approx(2.6, rel=0.03)


def test_request_overhead_lowers_small_concurrency_throughput():
    plain = predict_closed_loop(EAGLE3, 1, prompt_tokens=32, output_tokens=256)
    slow = predict_closed_loop(
        EAGLE3, 1, prompt_tokens=32, output_tokens=256, request_overhead_s=0.5
    )
    assert slow.output_tok_s < plain.output_tok_s
    run = simulate_closed_loop(
        EAGLE3, 1, prompt_tokens=32, output_tokens=256, duration_s=300, request_overhead_s=0.5
    )
    assert run.output_tok_s == pytest.approx(slow.output_tok_s, rel=0.03)


def _request(n, max_tokens=10, prompt=4):
    return SimRequest(
        request_id=str(n),
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        target=max_tokens,
        target_reason="length",
        arrival=0.0,
    )


def test_scheduler_caps_the_batch_and_queues_the_rest():
    core = SchedulerCore(BASELINE.replace(max_running=2))
    for n in range(3):
        core.submit(_request(n))
    assert len(core.admit(0.0)) == 2
    assert len(core.queue) == 1


def test_scheduler_respects_the_kv_budget():
    core = SchedulerCore(BASELINE.replace(kv_tokens=30))
    for n in range(3):
        core.submit(_request(n))  # 14 KV tokens each
    assert len(core.admit(0.0)) == 2
    for _ in range(10):
        core.advance()
    assert core.kv_used == 0
    assert len(core.admit(1.0)) == 1


def test_step_time_includes_prefill_of_admitted_requests():
    core = SchedulerCore(BASELINE)
    core.submit(_request(0, prompt=1000))
    admitted = core.admit(0.0)
    expected = BASELINE.step_seconds(1) + BASELINE.prefill_seconds(1000)
    assert core.step_seconds(admitted) == pytest.approx(expected)
    assert core.step_seconds([]) == pytest.approx(BASELINE.step_seconds(1))


def test_same_seed_gives_the_same_draws():
    def draws(seed):
        core = SchedulerCore(EAGLE3, seed=seed)
        core.submit(_request(0, max_tokens=500))
        core.admit(0.0)
        out = []
        while core.running:
            before = core.generated_tokens
            core.advance()
            out.append(core.generated_tokens - before)
        return out

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_pseudo_eos_is_seeded_and_only_without_ignore_eos():
    a, b = (
        SchedulerCore(BASELINE, seed=3, eos_prob=0.05),
        SchedulerCore(BASELINE, seed=3, eos_prob=0.05),
    )
    lengths = [a.target_length(1000, False) for _ in range(50)]
    assert lengths == [b.target_length(1000, False) for _ in range(50)]
    assert any(reason == "stop" for _, reason in lengths)
    assert a.target_length(1000, True) == (1000, "length")
    assert SchedulerCore(BASELINE).target_length(1000, False) == (1000, "length")
