"""Controller tracking from per-second scrapes: the series per engine, the switches (a change
of the drafted-tokens-per-step level between two scrapes) and the cost on each side."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from benchlib.stats.controller import (
    ControllerPoint,
    controller_figures,
    controller_series,
    detect_switches,
    detect_tier_switches,
    hidden_between_scrapes,
    match_switches,
    scrape_values,
    tier_reading,
)

SGLANG_TEXT = """\
# HELP sglang:spec_num_steps The number of speculative draft steps of the active tier.
# TYPE sglang:spec_num_steps gauge
sglang:spec_num_steps{model_name="m",tp_rank="0",dp_rank="0"} 3.0
sglang:spec_num_steps{model_name="m",tp_rank="1",dp_rank="0"} 3.0
sglang:spec_accept_length{model_name="m",tp_rank="0",dp_rank="0"} 2.5
sglang:spec_accept_length{model_name="m",tp_rank="1",dp_rank="0"} 2.5
sglang:spec_accept_rate{model_name="m",tp_rank="0",dp_rank="0"} 0.5
sglang:spec_accept_rate{model_name="m",tp_rank="1",dp_rank="0"} 0.5
sglang:gen_throughput{model_name="m",tp_rank="0",dp_rank="0"} 200.0
sglang:gen_throughput{model_name="m",tp_rank="1",dp_rank="0"} 200.0
sglang:spec_num_steps_unrelated{model_name="m"} 99.0
sglang:num_running_reqs{model_name="m",tp_rank="0",dp_rank="0"} 7.0
sglang:generation_tokens_total{model_name="m"} 123.0
"""


def test_a_scrape_keeps_the_tracked_gauges_as_their_mean_over_ranks_and_nothing_else() -> None:
    assert scrape_values(SGLANG_TEXT) == {
        "sglang:spec_num_steps": 3.0,
        "sglang:spec_accept_length": 2.5,
        "sglang:spec_accept_rate": 0.5,
        "sglang:gen_throughput": 200.0,
    }


def test_vllm_counters_are_summed_over_label_sets_and_differenced_per_second() -> None:
    def text(generated: float, drafts: float, draft_tokens: float, accepted: float) -> str:
        return (
            f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {generated}\n'
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}\n'
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}\n'
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}\n'
        )

    scrapes = [
        scrape_values(text(0, 0, 0, 0)),
        scrape_values(text(250, 100, 300, 150)),  # 100 drafting steps of K=3, 150 accepted
        scrape_values(text(650, 100, 300, 150)),  # 400 tokens, nothing drafted: off
    ]
    source, points = controller_series([10.0, 11.0, 13.0], scrapes)
    assert source == "vllm_counters"
    first, second = points
    assert (first.t, first.drafted_per_step, first.tokens_per_step) == (11.0, 3.0, 2.5)
    assert (first.acceptance, first.throughput) == (0.5, 250.0)
    assert (second.drafted_per_step, second.tokens_per_step, second.acceptance) == (0.0, 1.0, None)
    assert second.throughput == 200.0  # 400 tokens over 2 s


def _points(
    levels: Sequence[float | None],
    throughputs: Sequence[float],
    acceptance: Sequence[float | None],
) -> list[ControllerPoint]:
    return [
        ControllerPoint(float(t), k, None, a, tp)
        for t, (k, tp, a) in enumerate(zip(levels, throughputs, acceptance, strict=True))
    ]


def test_a_switch_is_placed_between_its_scrapes_and_costed_on_both_sides_without_the_straddler() -> (
    None
):
    levels = [3, 3, 3, 3, 0, 0, 0, 0]
    tput = [100, 110, 120, 130, 999, 200, 220, 240]  # 999: the mixed second, left out
    acc = [0.6, 0.6, 0.6, 0.6, None, None, None, None]
    [switch] = detect_switches(_points(levels, tput, acc), window=3)
    assert (switch.t, switch.window, switch.before, switch.after) == (3.5, (3.0, 4.0), 3.0, 0.0)
    assert switch.throughput_before == pytest.approx(120.0)  # the 3 seconds before: 110-130
    assert switch.throughput_after == pytest.approx(220.0)  # the 3 after, not the straddler
    assert switch.throughput_change == pytest.approx(220 / 120 - 1)
    assert switch.acceptance_drop is None  # nothing drafted after it


def test_an_acceptance_drop_after_drafting_turns_back_on_is_its_cost() -> None:
    levels = [0, 0, 0, 3, 3, 3, 3]
    acc: list[float | None] = [None, None, None, 0.7, 0.3, 0.35, 0.4]
    tput = [500, 500, 500, 300, 280, 290, 300]
    before_on = detect_switches(
        _points([3, 3, 3, *levels], [300] * 3 + tput, [0.7, 0.7, 0.7, *acc]), window=3
    )
    off, on = before_on
    assert (off.before, off.after, on.before, on.after) == (3.0, 0.0, 0.0, 3.0)
    # The cost of each side stops at the neighbouring switch.
    assert off.throughput_after == pytest.approx(500.0)
    assert on.throughput_before == pytest.approx(500.0)
    assert on.acceptance_before is None  # not drafting before: no acceptance to compare with
    assert off.acceptance_before == pytest.approx(0.7)
    assert on.acceptance_after == pytest.approx(0.35)


def test_scrapes_without_a_level_are_skipped_and_a_steady_level_has_no_switch() -> None:
    points = _points([3, 3, None, 3, 3], [1, 1, 1, 1, 1], [0.5] * 5)
    assert detect_switches(points) == []


def test_the_figures_are_plain_json_in_seconds_since_the_level_opened() -> None:
    scrapes = [scrape_values(SGLANG_TEXT), scrape_values(SGLANG_TEXT.replace(" 3.0", " 0.0"))]
    figures = controller_figures([100.2, 101.2], scrapes, opened_at=100.0)
    assert figures is not None
    assert figures["source"] == "sglang_gauges"
    assert figures["series"]["t_s"] == [0.2, 1.2]
    assert figures["series"]["drafted_per_step"] == [3.0, 0.0]
    assert figures["series"]["acceptance"] == [0.5, None]  # tier 0: nothing drafted to accept
    [switch] = figures["switches"]
    assert (switch["t_s"], switch["before"], switch["after"]) == (0.7, 3.0, 0.0)
    assert controller_figures([1.0], [{"sglang:num_running_reqs": 1.0}], opened_at=0.0) is None


def test_matching_finds_each_true_switch_within_the_tolerance_and_names_strays() -> None:
    match = match_switches([10.4, 20.0, 40.0], [10.0, 10.9, 21.5], tolerance_s=1.0)
    assert match.nearest_s == pytest.approx((0.4, 0.5, 1.5))
    assert match.missed == (21.5,)
    assert match.unmatched_detected == (20.0, 40.0)  # 20.0 is 1.5 s from 21.5


def test_a_flap_out_and_back_between_two_scrapes_is_what_a_per_second_reading_cannot_show() -> None:
    truth = [(1.2, 3, 1), (1.5, 1, 3), (2.5, 3, 1), (3.1, 1, 0), (3.4, 0, 1), (3.6, 1, 0)]
    # Scrapes at 1, 2, 3, 4: the 1.2/1.5 flap returns to K=3 before the scrape at 2; the three
    # switches between 3 and 4 leave the level changed (1 -> 0), so that interval shows one.
    assert hidden_between_scrapes(truth, [1.0, 2.0, 3.0, 4.0]) == (1.2, 1.5)
    # Before the first scrape or after the last: outside the series, not hidden by it.
    assert hidden_between_scrapes([(0.5, 3, 1), (0.6, 1, 3)], [1.0, 2.0]) == ()


def test_a_server_without_speculation_is_tracked_as_drafting_nothing() -> None:
    # The static "off" arm: SGLang exports no spec gauges without a drafter, vLLM no spec
    # counters; its throughput per second is what the adaptive arm is held against.
    sglang = [{"sglang:gen_throughput": 500.0}, {"sglang:gen_throughput": 520.0}]
    source, points = controller_series([1.0, 2.0], sglang)
    assert source == "sglang_gauges"
    assert [(p.drafted_per_step, p.tokens_per_step, p.throughput) for p in points] == [
        (0.0, 1.0, 500.0),
        (0.0, 1.0, 520.0),
    ]
    vllm = [{"vllm:generation_tokens_total": 0.0}, {"vllm:generation_tokens_total": 480.0}]
    source, [point] = controller_series([1.0, 2.0], vllm)
    assert (source, point.drafted_per_step, point.throughput) == ("vllm_counters", 0.0, 480.0)


def _readings(changes: Sequence[tuple[float, float]], end: float, step: float = 0.05):
    """Tier readings every ``step`` from 0 to ``end``: ``changes`` are (time, new tier)."""
    times = [round(i * step, 3) for i in range(int(end / step) + 1)]
    tiers = [next(k for t0, k in reversed(changes) if t0 <= t) for t in times]
    return times, [float(k) for k in tiers]


def test_the_tier_reading_is_the_mean_over_ranks_of_that_gauge_alone() -> None:
    assert tier_reading(SGLANG_TEXT) == 3.0  # not the _unrelated family with the same prefix
    assert tier_reading("sglang:gen_throughput 200.0\n") is None


def test_a_flap_shorter_than_a_second_is_found_in_the_fast_readings_and_costed_as_one_episode() -> (
    None
):
    # Tier 3, a flap to 1 from 5.02 to 5.17 s (150 ms, both inside the per-second interval
    # (5, 6]), then a lasting switch to 0 at 9.51 s.
    times, tiers = _readings([(0.0, 3), (5.02, 1), (5.17, 3), (9.51, 0)], end=14.0)
    points = _points(
        [3] * 10 + [0] * 5,
        [100, 100, 100, 110, 100, 120, 100, 100, 100, 100, 300, 310, 320, 330, 340],
        [0.6] * 10 + [None] * 5,
    )
    # Once a second the flap leaves no trace: both scrapes around it read 3.
    assert [(s.before, s.after) for s in detect_switches(points)] == [(3.0, 0.0)]
    out, back, off = detect_tier_switches(times, tiers, points)
    assert (out.before, out.after, back.before, back.after) == (3.0, 1.0, 1.0, 3.0)
    # Placed in the middle of the two readings around it: within half a reading of the truth.
    assert out.t == pytest.approx(5.025) and back.t == pytest.approx(5.175)
    assert off.t == pytest.approx(9.525) and off.window == pytest.approx((9.5, 9.55))
    # No whole second lies between the flap's two switches: one episode, costed from the
    # seconds wholly before it (points 3, 4, 5 cover (2, 5]) to those wholly after (points 7,
    # 8, 9 over (6, 9]); the point at 6 s straddles the flap and is in neither side.
    for switch in (out, back):
        assert switch.episode == pytest.approx((5.0, 5.2)) and switch.episode_switches == 2
        assert switch.throughput_before == pytest.approx(110.0)
        assert switch.throughput_after == pytest.approx(100.0)
        assert switch.acceptance_drop == pytest.approx(0.0)
    # The lasting switch stands alone: after the episode (points 7-9) against 11-13 (the
    # point at 10 s straddles it).
    assert off.episode is None and off.episode_switches == 1
    assert off.throughput_before == pytest.approx(100.0)
    assert off.throughput_after == pytest.approx(320.0)
    assert off.acceptance_before == pytest.approx(0.6) and off.acceptance_after is None


def test_figures_take_the_switches_from_the_tier_readings_where_there_are_any() -> None:
    texts = [SGLANG_TEXT] * 3
    scrapes = [scrape_values(t) for t in texts]
    times, tiers = _readings([(0.0, 3), (0.52, 1), (0.61, 3)], end=2.0)
    figures = controller_figures(
        [100.0, 101.0, 102.0],
        scrapes,
        opened_at=100.0,
        tier_times=[100.0 + t for t in times],
        tiers=tiers,
        tier_interval_s=0.05,
    )
    assert figures is not None and figures["switches_from"] == "tier_readings"
    assert [(s["t_s"], s["before"], s["after"]) for s in figures["switches"]] == [
        (0.525, 3.0, 1.0),
        (0.625, 1.0, 3.0),
    ]
    assert figures["switches"][0]["episode_s"] == [0.5, 0.65]
    assert figures["tier_readings"]["interval_s"] == 0.05
    assert figures["tier_readings"]["t_s"][:2] == [0.0, 0.05]
    # Without tier readings (vLLM, or a server without the tier gauge): from the series.
    plain = controller_figures([100.0, 101.0, 102.0], scrapes, opened_at=100.0)
    assert plain is not None and plain["switches_from"] == "series" and plain["switches"] == []
    assert "tier_readings" not in plain
