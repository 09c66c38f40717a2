"""A simulated server started with the engines' own load-adaptive flags (the argv that
``schedule_configs.engine_schedules`` emits) picks each decode step's draft length from the
running batch, as vLLM and SGLang do, with the cost and acceptance per draft length of
docs/simulator.md ("Load-adaptive speculation")."""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from pathlib import Path

import pytest

from benchlib.simulator.adaptive import (
    AdaptiveSpeculation,
    accept_length_for,
    profile_for_draft_length,
    sglang_spec_cuda_graph_bs,
)
from benchlib.simulator.app import SimApp
from benchlib.simulator.cli import parse_config
from benchlib.simulator.config import SimConfig
from benchlib.simulator.metrics import EngineMetrics
from benchlib.simulator.model import predict_closed_loop
from benchlib.simulator.preview import preview, table
from benchlib.simulator.profiles import PROFILES, Profile
from benchlib.simulator.scheduler import SchedulerCore, SimRequest
from benchlib.simulator.virtual import VirtualRun, simulate_closed_loop
from benchlib.stats.schedule import Step
from benchlib.stats.schedule_configs import engine_schedules

from .conftest import call

BASELINE, EAGLE3 = PROFILES["baseline"], PROFILES["eagle3"]
# "K=3 up to batch 2, off above", as the schedule derivation would hand it over.
SCHEDULE = (Step(1, 2, 3), Step(3, None, 0))


def run(
    profile: Profile,
    concurrency: int,
    speculation: AdaptiveSpeculation | None = None,
    duration_s: float = 30.0,
) -> VirtualRun:
    """A short level on the virtual clock (5 s of ramp-up left out)."""
    return simulate_closed_loop(
        profile,
        concurrency,
        prompt_tokens=32,
        output_tokens=256,
        duration_s=duration_s,
        warmup_s=5.0,
        speculation=speculation,
    )


def engine_argv(engine: str, steps: tuple[Step, ...], folder: Path) -> list[str]:
    """The emitted configuration for ``engine`` as simulator flags (its file written)."""
    by_engine = {e.engine: e for e in engine_schedules(steps, vllm_base={"method": "eagle3"})}
    entry = by_engine[engine]
    if entry.file_name:
        (folder / entry.file_name).write_text(entry.file_text)
    argv = shlex.split(entry.value)
    if entry.file_name:
        argv = [str(folder / a) if a == entry.file_name else a for a in argv]
    style = ["--metrics-style", "vllm"] if engine == "vLLM" else []
    return ["--profile", "eagle3", *style, *argv]


def test_draft_length_zero_is_the_baseline_step_and_spec_steps_the_eagle3_profile() -> None:
    off = profile_for_draft_length(EAGLE3, 0)
    assert (off.t0_ms, off.k_ms, off.tokens_per_step()) == (BASELINE.t0_ms, BASELINE.k_ms, 1.0)
    assert profile_for_draft_length(EAGLE3, 3) is EAGLE3


def test_other_draft_lengths_move_the_cost_linearly_and_keep_the_per_token_acceptance() -> None:
    one, five = profile_for_draft_length(EAGLE3, 1), profile_for_draft_length(EAGLE3, 5)
    assert one.t0_ms == pytest.approx(BASELINE.t0_ms + (EAGLE3.t0_ms - BASELINE.t0_ms) / 3)
    assert five.k_ms == pytest.approx(BASELINE.k_ms + (EAGLE3.k_ms - BASELINE.k_ms) * 5 / 3)
    assert one.accept_length == pytest.approx(accept_length_for(2.6, 3, 1))
    assert (one.spec_steps, five.spec_steps) == (1, 5)
    assert 1.0 < one.accept_length < 2.6 < five.accept_length < 6.0


@pytest.mark.parametrize("concurrency", [1, 5, 250])
def test_a_schedule_that_never_drafts_runs_the_baseline_step_for_step(concurrency: int) -> None:
    config = parse_config(["--profile", "eagle3", "--speculative-num-steps", "0"])
    assert run(EAGLE3, concurrency, config.speculation) == run(BASELINE, concurrency)


@pytest.mark.parametrize("concurrency", [1, 5, 250])
def test_a_schedule_drafting_spec_steps_everywhere_is_the_eagle3_profile(concurrency: int) -> None:
    flags = ["--metrics-style", "vllm", "--speculative-config", '{"num_speculative_tokens": 3}']
    config = parse_config(["--profile", "eagle3", *flags])
    assert run(EAGLE3, concurrency, config.speculation) == run(EAGLE3, concurrency)


@pytest.mark.parametrize("engine", ["vLLM", "SGLang"])
def test_k3_up_to_batch_2_then_off_is_eagle3_at_one_stream_and_baseline_saturated(
    engine: str, tmp_path: Path
) -> None:
    config = parse_config(engine_argv(engine, SCHEDULE, tmp_path))

    # Step for step the fixed profile of the band each level's running batch falls in.
    for c, fixed in ((1, EAGLE3), (2, EAGLE3), (5, BASELINE), (250, BASELINE)):
        assert run(config.profile, c, config.speculation) == run(fixed, c)
    # And so the calibrated figures: EAGLE-3's single stream, the baseline's saturation.
    for c, fixed in ((1, EAGLE3), (250, BASELINE)):
        tuned = run(config.profile, c, config.speculation, duration_s=200.0)
        predicted = predict_closed_loop(fixed, c, prompt_tokens=32, output_tokens=256)
        assert tuned.output_tok_s == pytest.approx(predicted.output_tok_s, rel=0.02)


def test_vllm_argv_ranges_are_parsed_with_the_last_k_above_them() -> None:
    config = parse_config(
        [
            "--profile", "eagle3", "--metrics-style", "vllm", "--speculative-config",
            '{"method": "eagle3", "num_speculative_tokens": 5, '
            '"num_speculative_tokens_per_batch_size": [[1, 2, 5], [3, 8, 2], [9, 16, 0]]}',
        ]
    )  # fmt: skip
    assert config.speculation is not None
    lengths = [config.speculation.draft_length(b) for b in (1, 2, 3, 8, 9, 16, 200)]
    assert lengths == [5, 5, 2, 2, 0, 0, 0]


def test_sglang_pads_the_batch_to_a_cuda_graph_size_before_the_tier_lookup(
    tmp_path: Path,
) -> None:
    tiers = tmp_path / "tiers.json"
    tiers.write_text(json.dumps({"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [1]}}))
    argv = ["--profile", "eagle3", "--speculative-adaptive", "--speculative-adaptive-config"]
    argv += [str(tiers), "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
    padded = parse_config([*argv, "--cuda-graph-bs", "1", "2", "4", "8", "16"]).speculation
    assert padded is not None
    assert padded.padded(5) == 8
    assert [padded.draft_length(b) for b in (4, 5, 8)] == [3, 1, 1]
    # Five running requests: every step pads to 8 and drafts 1.
    core = SchedulerCore(EAGLE3, speculation=padded)
    _run(core, concurrency=5, steps=40)
    assert set(core.steps_by_draft_length) == {1}
    # SGLang's own list when speculating has 5 (and every size up to 8): no padding there.
    default = parse_config(argv).speculation
    assert default is not None
    assert default.cuda_graph_bs == sglang_spec_cuda_graph_bs(256)
    assert default.cuda_graph_bs[:9] == (1, 2, 3, 4, 5, 6, 7, 8, 10)
    assert [default.draft_length(b) for b in (5, 7, 8, 9)] == [3, 3, 1, 1]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--metrics-style", "vllm", "--speculative-config",
             '{"num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[2, 8, 3]]}'],
            "first range must start at 1",
        ),
        (
            ["--metrics-style", "vllm", "--speculative-config",
             '{"num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[1, 8, 3]]}'],
            "more than num_speculative_tokens 2",
        ),
        (["--speculative-config", '{"num_speculative_tokens": 3}'], "--metrics-style vllm"),
        (["--metrics-style", "vllm", "--speculative-config", "{3"], "not valid JSON"),
        (["--speculative-adaptive", "--speculative-num-steps", "3"], "needs --speculative-adaptive-config"),
        (["--speculative-adaptive", "--speculative-adaptive-config", "{tiers}",
          "--speculative-num-steps", "2"], "not among the candidates"),
        (["--speculative-adaptive", "--speculative-adaptive-config", "{tiers}",
          "--speculative-num-steps", "3", "--speculative-eagle-topk", "4"], "topk 1"),
        (["--metrics-style", "vllm", "--speculative-num-steps", "3"], "SGLang's flag"),
    ],
)  # fmt: skip
def test_an_argv_the_engine_would_refuse_is_refused_with_the_rule_it_breaks(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiers = tmp_path / "tiers.json"
    tiers.write_text('{"1": {"candidate_steps": [3]}, "3": {"candidate_steps": [0]}}')
    argv = ["--profile", "eagle3", *(str(tiers) if f == "{tiers}" else f for f in flags)]
    with pytest.raises(SystemExit) as exited:
        parse_config(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_drafting_on_a_profile_without_a_drafter_or_an_off_cost_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse_config(["--profile", "baseline", "--speculative-num-steps", "3"])
    assert "needs a speculative profile" in capsys.readouterr().err
    custom = ["--accept-length", "2.0", "--spec-steps", "2", "--speculative-num-steps", "1"]
    with pytest.raises(SystemExit):
        parse_config(["--profile", "baseline", *custom])
    assert "--off-t0-ms" in capsys.readouterr().err
    config = parse_config(["--profile", "baseline", *custom, "--off-t0-ms", "9", "--off-k-ms", "1"])
    assert config.speculation is not None


def _run(core: SchedulerCore, *, concurrency: int, steps: int) -> None:
    """Closed loop without a clock: a finished request is replaced at once."""
    serial = 0

    def submit() -> None:
        nonlocal serial
        serial += 1
        core.submit(SimRequest(request_id=str(serial), prompt_tokens=8, max_tokens=20,
                               target=20, target_reason="length", arrival=0.0))  # fmt: skip

    for _ in range(concurrency):
        submit()
    for _ in range(steps):
        core.step_seconds(core.admit(0.0))
        for _done in core.advance():
            submit()


def test_vllm_counts_drafting_steps_only_and_sglang_shows_the_active_tier(tmp_path: Path) -> None:
    config = parse_config(engine_argv("vLLM", SCHEDULE, tmp_path))
    core = SchedulerCore(config.profile, speculation=config.speculation)
    _run(core, concurrency=2, steps=30)
    drafted = core.draft_steps
    _run(core, concurrency=3, steps=30)  # five running now: nothing drafted
    assert core.steps_by_draft_length[0] >= 29
    assert core.draft_steps == drafted > 0
    assert core.verify_steps > core.draft_steps
    text = EngineMetrics("m", "vllm", 1).render(core).decode()
    assert (
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {float(drafted)!r}' in text
    )
    assert f"{float(3 * drafted)!r}" in _line(text, "vllm:spec_decode_num_draft_tokens_total")
    sglang = EngineMetrics("m", "sglang", 1).render(core).decode()
    assert _line(sglang, "sglang:spec_num_steps{").endswith(" 0.0")
    assert _line(sglang, "sglang:spec_num_draft_tokens{").endswith(" 1.0")


def _line(text: str, prefix: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(prefix))


async def test_the_truth_log_records_each_steps_draft_length_and_the_batch_it_came_from(
    tmp_path: Path,
) -> None:
    truth = tmp_path / "truth.jsonl"
    argv = [*engine_argv("SGLang", SCHEDULE, tmp_path), "--truth-log", str(truth)]
    argv += ["--disable-cuda-graph-padding"]
    config: SimConfig = parse_config(argv)
    app = SimApp(config)
    body = {"prompt": "hi", "max_tokens": 12, "ignore_eos": True, "stream": True}
    await call(app, "POST", "/v1/completions", body)  # alone: batch 1, K=3
    await asyncio.gather(*(call(app, "POST", "/v1/completions", body) for _ in range(4)))
    metrics = (await call(app, "GET", "/metrics")).body.decode()
    app.truth.close()
    records = [json.loads(line) for line in truth.read_text().splitlines()]
    assert len(records) == 5
    runs = [run for record in records for run in record["decode_steps"]]
    assert config.speculation is not None
    for batch, k, _count in runs:
        assert k == config.speculation.draft_length(batch)
    assert {k for _, k, _ in runs} == {0, 3}
    # Alone: batch 1, K=3, 11 tokens after the prefill token in 3 to 11 verify steps.
    [[batch, k, count]] = records[0]["decode_steps"]
    assert (batch, k) == (1, 3) and 3 <= count <= 11
    # The four together ran at batch 4 (off): one token per step.
    assert all(r["decode_steps"] == [[4, 0, 11]] for r in records[1:])
    assert _line(metrics, "sglang:spec_num_steps{").endswith(" 0.0")


def test_the_preview_derives_a_schedule_that_matches_the_best_fixed_variant_at_each_level() -> None:
    result = preview(draft_lengths=(0, 1, 3), levels=(1, 2, 5, 250), repeats=2, duration_s=120.0)
    steps = result.schedule.steps()
    assert steps[0].draft_length > 0 and steps[-1].draft_length == 0
    for c in result.levels:
        best = max(samples[c].value for samples in result.fixed.values())
        assert result.tuned[c].value == pytest.approx(best, rel=0.02)
    assert result.tuned[1].value >= result.fixed["K=3"][1].value  # at least EAGLE-3's C=1
    assert result.tuned[250].value >= 0.99 * result.fixed["off"][250].value
    assert "speculative_adaptive.json" in table(result)[-3]


async def test_the_controller_log_records_each_switch_with_its_time_and_batch(
    tmp_path: Path,
) -> None:
    log = tmp_path / "controller.jsonl"
    argv = [*engine_argv("SGLang", SCHEDULE, tmp_path), "--controller-log", str(log)]
    app = SimApp(parse_config([*argv, "--disable-cuda-graph-padding"]))
    body = {"prompt": "hi", "max_tokens": 12, "ignore_eos": True, "stream": True}
    await call(app, "POST", "/v1/completions", body)  # alone: K=3, the first tier: no switch
    together = time.time()
    await asyncio.gather(*(call(app, "POST", "/v1/completions", body) for _ in range(4)))
    alone = time.time()
    await call(app, "POST", "/v1/completions", body)  # alone again: back to K=3
    app.controller_truth.close()
    switches = [json.loads(line) for line in log.read_text().splitlines()]
    # Four together: K=0 from the step that ran them (batch 4 >= 3); then K=3 at batch 1.
    # Every step drafts what the log's last switch says, so nothing else is logged.
    assert [(s["from"], s["to"], s["batch"]) for s in switches] == [(3, 0, 4), (0, 3, 1)]
    assert together <= switches[0]["t"] <= alone <= switches[1]["t"] <= time.time()


def test_no_controller_log_is_written_without_a_schedule(tmp_path: Path) -> None:
    log = tmp_path / "controller.jsonl"
    SimApp(parse_config(["--profile", "eagle3", "--controller-log", str(log)]))
    assert not log.exists()
