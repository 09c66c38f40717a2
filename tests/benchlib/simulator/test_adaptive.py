from __future__ import annotations

import json
import random
import shlex

import pytest

from benchlib.simulator.adaptive import (
    accept_length_for,
    from_argv,
    from_sglang_config,
    from_vllm_config,
)
from benchlib.stats.schedule import Step
from benchlib.stats.schedule_configs import engine_schedules
from tests.benchlib.stats import documented_syntax as doc


def test_vllm_ranges_pick_the_range_holding_the_batch_and_the_last_k_above_it():
    schedule = from_vllm_config(
        {
            "method": "eagle3",
            "num_speculative_tokens": 3,
            doc.VLLM_SETTING: json.loads(doc.VLLM_EXAMPLE),
        }
    )
    assert [schedule.draft_length(b) for b in (1, 8, 9, 1024, 5000)] == [3, 3, 0, 0, 0]


def test_a_vllm_config_without_ranges_drafts_the_same_at_every_batch():
    schedule = from_vllm_config({"method": "eagle3", "num_speculative_tokens": 4})
    assert {schedule.draft_length(b) for b in (1, 7, 300)} == {4}


def test_vllm_schedules_breaking_its_rules_or_with_gaps_are_refused():
    with pytest.raises(ValueError, match="first range must start at 1"):
        from_vllm_config({doc.VLLM_SETTING: [[2, 8, 3]]})
    with pytest.raises(ValueError, match="batch sizes 5-9 fall between two ranges"):
        from_vllm_config({doc.VLLM_SETTING: [[1, 4, 3], [10, 20, 0]]})


def test_sglang_pads_to_a_cuda_graph_batch_size_then_takes_the_closest_key_at_or_below():
    config = {
        "1": {"candidate_steps": [3]},
        "6": {"candidate_steps": [1]},
        "64": {"candidate_steps": [0]},
    }
    unpadded = from_sglang_config(config, num_steps=3)
    assert [unpadded.draft_length(b) for b in (1, 5, 6, 63, 64, 500)] == [3, 3, 1, 1, 0, 0]
    padded = from_sglang_config(config, num_steps=3, cuda_graph_bs=(1, 2, 4, 8, 16, 32, 48, 64))
    # 5 pads to 8 (>= key 6): the tier for 6 applies from batch 5; 49 pads to 64: off.
    assert [padded.draft_length(b) for b in (4, 5, 6, 48, 49, 64)] == [3, 1, 1, 1, 0, 0]
    # Above the largest graph batch size there is nothing to pad to.
    assert padded.padded(100) == 100


def test_sglang_configs_the_simulator_cannot_read_faithfully_are_refused():
    with pytest.raises(ValueError, match="not among the candidates"):
        from_sglang_config({"1": {"candidate_steps": [3]}}, num_steps=2)
    with pytest.raises(ValueError, match="no tier for batch sizes below 4"):
        from_sglang_config({"4": {"candidate_steps": [3]}}, num_steps=3)
    with pytest.raises(ValueError, match="picks among several"):
        from_sglang_config({"1": {"candidate_steps": [1, 3]}}, num_steps=3)


def test_the_emitted_configurations_read_back_as_the_schedule_at_every_batch_size():
    rng = random.Random(3)
    for _ in range(100):
        bounds = sorted(rng.sample(range(2, 200), rng.randint(1, 4)))
        starts = [1, *bounds]
        steps = tuple(
            Step(s, starts[i + 1] - 1 if i + 1 < len(starts) else None, rng.randint(0, 5))
            for i, s in enumerate(starts)
        )
        if max(s.draft_length for s in steps) == 0:
            continue
        by_engine = {e.engine: e for e in engine_schedules(steps, vllm_base={"method": "eagle3"})}
        files = {by_engine["SGLang"].file_name: by_engine["SGLang"].file_text}
        vllm = from_argv(shlex.split(by_engine["vLLM"].value))
        sglang = from_argv(shlex.split(by_engine["SGLang"].value), read_text=files.__getitem__)
        assert vllm is not None
        assert sglang is not None
        for batch in range(1, 260):
            want = next(s.draft_length for s in steps if s.start <= batch <= (s.end or batch))
            assert (vllm.draft_length(batch), sglang.draft_length(batch)) == (want, want)


def test_launch_argv_without_a_schedule_or_with_half_of_one():
    assert from_argv(["--model-path", "m", "--speculative-num-steps", "3"]) is None
    with pytest.raises(ValueError, match="needs --speculative-adaptive-config"):
        from_argv(["--speculative-adaptive", "--speculative-num-steps", "3"])
    inline = from_argv(['--speculative-config={"num_speculative_tokens": 2}'])
    assert inline is not None
    assert inline.draft_length(50) == 2


def test_shorter_or_longer_chains_keep_the_drafters_per_token_acceptance():
    # Accept length 2.6 with 3 drafts: p + p^2 + p^3 = 1.6.
    length_1 = accept_length_for(2.6, 3, 1)
    p = length_1 - 1.0
    assert p + p**2 + p**3 == pytest.approx(1.6, abs=1e-9)
    assert accept_length_for(2.6, 3, 3) == pytest.approx(2.6, abs=1e-9)
    assert accept_length_for(2.6, 3, 0) == 1.0
    assert 2.6 < accept_length_for(2.6, 3, 5) < 6.0  # at most 1 + 5 tokens per step
