from __future__ import annotations

import json
import random
import shlex

import pytest

from benchlib.stats.engines import ENGINE_NAMES, ENGINE_OPTIONS, option_row
from benchlib.stats.schedule import Step, Variant, derive_schedule
from benchlib.stats.schedule_configs import (
    check_steps,
    engine_schedules,
    expressible,
    sglang_adaptive_config,
    sglang_check,
    sglang_schedule_entry,
    vllm_check,
    vllm_ranges,
    vllm_schedule_entry,
)
from benchlib.stats.speculative_schedule import vllm_speculative_config
from benchlib.stats.types import Curve, LevelSample
from tests.benchlib.stats import documented_syntax as doc

CROSSOVER = (Step(1, 8, 3), Step(9, None, 0))
THREE_TIERS = (Step(1, 2, 5), Step(3, 16, 2), Step(17, None, 0))


def _k_for(ranges: list[list[int]], batch: int) -> int:
    """The documented reading: the range containing the batch; above the last, its K."""
    for start, end, k in ranges:
        if start <= batch <= end:
            return k
    assert batch > ranges[-1][1]
    return ranges[-1][2]


def _random_steps(rng: random.Random) -> tuple[Step, ...]:
    bounds = sorted(rng.sample(range(2, 300), rng.randint(0, 5)))
    starts = [1, *bounds]
    return tuple(
        Step(s, (starts[i + 1] - 1) if i + 1 < len(starts) else None, rng.randint(0, 6))
        for i, s in enumerate(starts)
    )


def test_the_documented_vllm_example_passes_the_rules_and_is_what_we_write_for_it():
    example = json.loads(doc.VLLM_EXAMPLE)
    vllm_check(example)
    assert vllm_ranges(CROSSOVER, max_num_seqs=1024) == example


@pytest.mark.parametrize(
    ("ranges", "broken"),
    [
        ([], "non-empty list"),
        ([[2, 8, 3], [9, 20, 0]], "first range must start at 1"),
        ([[1, 8, 3], [5, 20, 0]], "sorted and non-overlapping"),
        ([[1, 8, 3], [8, 20, 0]], "sorted and non-overlapping"),  # inclusive: 8 is in both
        ([[1, 8, 3], [20, 30, 1], [9, 19, 0]], "sorted and non-overlapping"),
        ([[1, 8, -1]], "K must be >= 0"),
        ([[1, 0, 3]], "end 0 is below start 1"),
        ([[1, 8]], "is not [start, end, K]"),
        ([[1, 8, 2.5]], "is not [start, end, K]"),
        ([[1, 8, True]], "is not [start, end, K]"),
        ({"1": 3}, "non-empty list"),
    ],
)
def test_vllm_rules_refuse_each_broken_rule(ranges: object, broken: str) -> None:
    with pytest.raises(ValueError, match=broken.replace("[", r"\[").replace("]", r"\]")):
        vllm_check(ranges)


def test_vllm_rules_allow_what_they_do_not_forbid():
    vllm_check([[1, 1, 0]])  # one range, K=0
    vllm_check([[1, 4, 3], [10, 20, 1]])  # a gap breaks none of the listed rules


def test_every_emitted_vllm_schedule_passes_the_rules_and_gives_each_batch_its_length():
    rng = random.Random(7)
    for _ in range(200):
        steps = _random_steps(rng)
        for max_num_seqs in (None, 512):
            ranges = vllm_ranges(steps, max_num_seqs=max_num_seqs)
            vllm_check(ranges)
            for batch in range(1, 600):
                want = next(s.draft_length for s in steps if s.start <= batch <= (s.end or batch))
                assert _k_for(ranges, batch) == want, (steps, batch)


def test_the_vllm_config_keeps_the_documented_launch_and_gains_the_schedule():
    flag, text = shlex.split(doc.VLLM_LAUNCH)
    base = json.loads(text)
    entry = vllm_schedule_entry(THREE_TIERS, base)
    assert entry.exact
    out_flag, out_text = shlex.split(entry.value)
    assert out_flag == flag == "--speculative-config"
    config = json.loads(out_text)
    assert config == {
        "method": "eagle3",
        "model": "D",
        "num_speculative_tokens": 5,
        doc.VLLM_SETTING: [[1, 2, 5], [3, 16, 2], [17, 17, 0]],
    }
    vllm_check(config[doc.VLLM_SETTING])
    assert (entry.engine, entry.option) == ("vLLM", doc.VLLM_SETTING)
    for upstream in ("vllm/config/speculative.py", "vllm/v1/spec_decode/dynamic/utils.py"):
        assert upstream in entry.source
        assert upstream in doc.VLLM_SOURCE
    assert entry.version in doc.VLLM_SOURCE


def test_a_threshold_schedule_writes_what_the_existing_vllm_switch_writes():
    argv = shlex.split(doc.VLLM_LAUNCH)
    existing = vllm_speculative_config(argv, 8)
    assert existing is not None
    entry = vllm_schedule_entry(CROSSOVER, json.loads(argv[1]))
    assert json.loads(shlex.split(entry.value)[1]) == json.loads(existing)


def test_a_schedule_that_never_drafts_serves_vllm_without_a_speculative_config():
    entry = vllm_schedule_entry((Step(1, None, 0),), {"method": "eagle3"})
    assert (entry.exact, entry.value) == (True, "")
    assert "without --speculative-config" in entry.note


def test_the_sglang_config_has_the_documented_flags_and_tier_form():
    entry = sglang_schedule_entry((Step(1, 63, 3), Step(64, None, 0)))
    argv = shlex.split(entry.value)
    flags = doc.SGLANG_FLAGS.split()  # --speculative-adaptive --speculative-adaptive-config FILE
    assert argv[:2] == flags[:2]
    assert argv[2] == entry.file_name
    config = json.loads(entry.file_text)
    # The built-in default's tier, quoted, is exactly our tier for "off from 64".
    assert config == {
        "1": {"candidate_steps": [3]},
        **json.loads("{" + doc.SGLANG_DEFAULT_TIER + "}"),
    }
    num_steps = int(argv[argv.index("--speculative-num-steps") + 1])
    sglang_check(config, num_steps)
    for upstream in ("server_args.py", "adaptive_spec_params.py"):
        assert upstream in entry.source
        assert upstream in doc.SGLANG_SOURCE
    assert entry.version in doc.SGLANG_SOURCE


def test_sglang_tiers_give_each_batch_its_length_by_the_closest_key_at_or_below():
    rng = random.Random(11)
    for _ in range(200):
        steps = _random_steps(rng)
        config = sglang_adaptive_config(steps)
        sglang_check(config, max(s.draft_length for s in steps))
        keys = sorted(int(k) for k in config)
        for batch in range(1, 400):
            key = max(k for k in keys if k <= batch)
            want = next(s.draft_length for s in steps if s.start <= batch <= (s.end or batch))
            assert config[str(key)]["candidate_steps"] == [want]


@pytest.mark.parametrize(
    ("config", "num_steps", "broken"),
    [
        ({"1": {"candidate_steps": [3]}}, 2, "not among the candidates"),
        ({"one": {"candidate_steps": [3]}}, 3, "not a batch size"),
        ({"0": {"candidate_steps": [3]}}, 3, "not a batch size"),
        ({"1": {"steps": [3]}}, 3, "candidate_steps"),
        ({"1": {"candidate_steps": []}}, 3, "candidate_steps"),
        ({"1": {"candidate_steps": [-1]}}, -1, "integers >= 0"),
        ({}, 3, "non-empty"),
    ],
)
def test_sglang_rules_refuse_each_broken_rule(config: object, num_steps: int, broken: str) -> None:
    with pytest.raises(ValueError, match=broken):
        sglang_check(config, num_steps)


def test_trtllm_writes_a_threshold_and_says_when_a_schedule_needs_more():
    (on_off,) = engine_schedules(CROSSOVER, "trtllm")
    assert (on_off.exact, on_off.value) == (True, "max_concurrency=8")
    (tiers,) = engine_schedules(THREE_TIERS, "trtllm")
    assert not tiers.exact
    assert tiers.value == ""
    assert "only turns drafting off above a batch size" in tiers.note
    assert "1-2: 5, 3-16: 2, 17+: 0" in tiers.note
    (rising,) = engine_schedules((Step(1, 4, 0), Step(5, None, 3)), "trtllm")
    assert not rising.exact


def test_llamacpp_has_no_load_knob_and_says_so():
    (schedule,) = engine_schedules(CROSSOVER, "llamacpp")
    assert not schedule.exact
    assert "no load-dependent knob" in schedule.note
    (fixed,) = engine_schedules((Step(1, None, 4),), "llamacpp")
    assert (fixed.exact, fixed.value) == (True, "--spec-type draft-simple --spec-draft-n-max 4")


def test_an_unknown_engine_gets_every_engine_with_the_tables_source_and_version():
    entries = engine_schedules(CROSSOVER, "simulator")
    assert [e.engine for e in entries] == list(ENGINE_NAMES.values())
    for entry in entries:
        row = next(
            r
            for r in ENGINE_OPTIONS
            if ENGINE_NAMES[r.engine] == entry.engine and r.option == entry.option
        )
        assert (entry.source, entry.version) == (row.source, row.version)


def test_what_each_option_can_carry_follows_the_table():
    assert expressible(THREE_TIERS, option_row("vllm", doc.VLLM_SETTING))
    assert expressible(THREE_TIERS, option_row("sglang", "--speculative-adaptive"))
    assert not expressible(THREE_TIERS, option_row("trtllm", "max_concurrency"))
    assert expressible(CROSSOVER, option_row("trtllm", "max_concurrency"))
    assert not expressible(CROSSOVER, option_row("llamacpp", "--spec-draft-n-max"))
    assert expressible((Step(1, None, 2),), option_row("llamacpp", "--spec-draft-n-max"))


@pytest.mark.parametrize(
    ("steps", "broken"),
    [
        ((), "at least one step"),
        ((Step(2, None, 3),), "starts at 2, expected 1"),
        ((Step(1, 4, 3), Step(6, None, 0)), "starts at 6, expected 5"),
        ((Step(1, 4, 3),), "the last step must have no end"),
        ((Step(1, None, 3), Step(5, None, 0)), "no end but is not the last"),
        ((Step(1, None, -1),), "draft length must be >= 0"),
    ],
)
def test_steps_must_cover_every_batch_size_once(steps: tuple[Step, ...], broken: str) -> None:
    with pytest.raises(ValueError, match=broken):
        check_steps(steps)


def test_a_derived_schedule_becomes_a_valid_vllm_and_sglang_configuration():
    def variant(name: str, k: int, means: dict[int, float]) -> Variant:
        levels = [LevelSample.from_repeats(c, [m * 0.997, m, m * 1.003]) for c, m in means.items()]
        return Variant(Curve(name, levels), k)

    off = variant("off", 0, {1: 92.6, 2: 180, 5: 400, 30: 700, 250: 773})
    k3 = variant("k3", 3, {1: 96.1, 2: 125, 5: 183, 30: 300, 250: 354})
    steps = derive_schedule([off, k3]).steps()
    assert steps == (Step(1, 1, 3), Step(2, None, 0))
    by_engine = {e.engine: e for e in engine_schedules(steps, vllm_base={"method": "eagle3"})}
    vllm, sglang = by_engine["vLLM"], by_engine["SGLang"]
    trtllm, llamacpp = by_engine["TensorRT-LLM"], by_engine["llama.cpp"]
    ranges = json.loads(shlex.split(vllm.value)[1])[doc.VLLM_SETTING]
    vllm_check(ranges)
    assert ranges == [[1, 1, 3], [2, 2, 0]]
    assert json.loads(sglang.file_text) == {
        "1": {"candidate_steps": [3]},
        "2": {"candidate_steps": [0]},
    }
    assert trtllm.value == "max_concurrency=1"
    assert not llamacpp.exact
