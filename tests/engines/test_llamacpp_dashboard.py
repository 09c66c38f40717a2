"""specdash driving a real llama-server: lifecycle, sweeps with per-level server figures, and
an A/B experiment, through the real agent, job worker, sweep job and load generator."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from benchmarks.experiments import services as experiment_services
from benchmarks.experiments.models import Experiment, ExperimentState, ExperimentStep, StepState
from benchmarks.sweeps.models import Sweep, SweepLevel, SweepState
from benchmarks.sweeps.services import sweep_create
from core.jobs.worker import Worker
from engines.llamacpp import llamacpp_argv
from engines.models import ModelPair, write_pair
from hosts import services
from hosts.models import Engine, Host, HostKind, InstanceState, ServerInstance, ServerProfile
from tests.engines.conftest import AGREEMENTS, N_MAX, THREADS, pids_alive
from tests.fixtures.ports import free_port

pytestmark = [pytest.mark.llamacpp, pytest.mark.django_db(transaction=True)]

MAX_TOKENS = 64
# A wait inside a test stays under the test's own timeout (pytest's 120 s here), so a hang fails
# with the wait's message rather than in pytest-timeout's kill.
INNER_WAIT_S = 100


@pytest.fixture
def local_host(db: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Host:
    monkeypatch.setattr(settings, "SPECDASH_RUN_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("SPECDASH_STOP_GRACE_S", "5")
    return Host.objects.create(name="cpu", kind=HostKind.LOCAL)


@pytest.fixture
def llamacpp_profile(
    local_host: Host, llama_server_bin: Path, tiny_models: dict[float, ModelPair]
) -> Callable[..., ServerProfile]:
    """A llama-server profile on this machine's CPU; `agreement=None` is the baseline."""

    def make(agreement: float | None, *, name: str, slots: int = 8) -> ServerProfile:
        pair = tiny_models[agreement if agreement is not None else AGREEMENTS[0]]
        port = free_port()
        argv = llamacpp_argv(
            str(llama_server_bin), str(pair.target), port=port,
            draft=str(pair.draft) if agreement is not None else None, draft_n_max=N_MAX,
            slots=slots, context=slots * 512, threads=THREADS,
        )  # fmt: skip
        # No served model name: specdash asks the server (/v1/models).
        return ServerProfile.objects.create(
            name=name, engine=Engine.LLAMACPP, host=local_host, launch_argv=argv, port=port,
            gpu_ids=[], readiness_timeout_s=120, speculative=agreement is not None,
            metrics_path="/metrics", readiness_path="/health",
        )  # fmt: skip

    return make


async def wait_state(
    instance_id: int, *states: str, timeout: float = INNER_WAIT_S
) -> ServerInstance:
    async with asyncio.timeout(timeout):
        while True:
            instance = await ServerInstance.objects.aget(pk=instance_id)
            if instance.state in states:
                return instance
            await asyncio.sleep(0.1)


async def until(check: Callable[[], Any], timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while not await sync_to_async(check)():
            await asyncio.sleep(0.2)


async def start_ready(profile: ServerProfile) -> ServerInstance:
    instance = await sync_to_async(services.instance_start)(profile=profile)
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED)
    assert ready.state == InstanceState.READY, (ready.reason, ready.log_tail)
    return ready


async def stop_verified(instance: ServerInstance) -> ServerInstance:
    await sync_to_async(services.instance_stop)(instance=instance)
    final = await wait_state(instance.pk, InstanceState.STOPPED, InstanceState.DIRTY)
    assert final.state == InstanceState.STOPPED, (final.reason, final.evidence)
    return final


def port_free(port: int) -> bool:
    """Whether a new server can take port: bind it as servers do (SO_REUSEADDR) and listen.

    A plain bind is the wrong probe here: llama-server closes its side of kept-alive connections
    when it stops, which leaves them in TIME_WAIT on the server's port for a minute, and a plain
    bind refuses a port with such connections (a clean-clone run failed on this) although any
    server starts on it. A process still listening on it refuses both."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(1)
        except OSError:
            return False
    return True


async def test_llama_server_starts_ready_stops_verified_and_a_kill_is_a_crash(
    worker: Worker, llamacpp_profile: Callable[..., ServerProfile]
) -> None:
    profile = await sync_to_async(llamacpp_profile)(AGREEMENTS[0], name="llama.cpp draft")
    ready = await start_ready(profile)
    assert ready.pid and pids_alive(ready.pid)
    # What the engine says about itself is kept (llama-server's /props).
    assert ready.server_info["props"]["total_slots"] == 8
    stopped = await stop_verified(ready)
    assert not pids_alive(ready.pid) and port_free(profile.port)
    states = [s async for s in stopped.events.filter(kind="state").values_list("state", flat=True)]
    assert states == ["loading", "ready", "stopping", "stopped"]

    again = await start_ready(profile)
    assert again.pid is not None
    os.kill(again.pid, signal.SIGKILL)
    crashed = await wait_state(again.pk, InstanceState.CRASHED, InstanceState.DIRTY, timeout=30)
    assert crashed.state == InstanceState.CRASHED
    assert crashed.exit_code == -9
    assert port_free(profile.port)


async def test_a_port_taken_by_another_process_is_refused_before_llama_server_starts(
    worker: Worker, llamacpp_profile: Callable[..., ServerProfile]
) -> None:
    profile = await sync_to_async(llamacpp_profile)(None, name="llama.cpp baseline")
    holder = socket.socket()
    holder.bind(("127.0.0.1", profile.port))
    holder.listen()
    try:
        instance = await sync_to_async(services.instance_start)(profile=profile)
        failed = await wait_state(instance.pk, InstanceState.FAILED, InstanceState.READY)
    finally:
        holder.close()
    assert failed.state == InstanceState.FAILED
    assert str(profile.port) in failed.reason
    assert failed.pid is None  # refused by the preflight: llama-server never ran


def _levels(sweep_id: int) -> list[SweepLevel]:
    return list(SweepLevel.objects.filter(sweep_id=sweep_id).order_by("index"))


@pytest.mark.parametrize("agreement", AGREEMENTS)
async def test_sweep_levels_show_llamacpps_accept_length_and_its_token_count(
    worker: Worker,
    llamacpp_profile: Callable[..., ServerProfile],
    tiny_models: dict[float, ModelPair],
    agreement: float,
) -> None:
    profile = await sync_to_async(llamacpp_profile)(agreement, name=f"llama.cpp {agreement:.2f}")
    instance = await start_ready(profile)
    load = {"api": "completions", "requests_per_level": 12, "max_tokens": MAX_TOKENS,
            "input_tokens": 6, "temperature": 0.0}  # fmt: skip
    sweep = await sync_to_async(sweep_create)(instance=instance, levels=[1, 2, 4], load=load)
    await until(lambda: Sweep.objects.get(pk=sweep.pk).is_finished, timeout=INNER_WAIT_S)
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.state == SweepState.COMPLETED, sweep.reason
    expected = tiny_models[agreement].expected(n_max=N_MAX, max_tokens=MAX_TOKENS).accept_length
    levels = await sync_to_async(_levels)(sweep.pk)
    assert [lv.concurrency for lv in levels] == [1, 2, 4]
    for level in levels:
        server = level.server_metrics
        assert server["available"], server
        assert server["engine"] == "llamacpp"
        # The client's token count is the server's own counter delta over the level, exactly.
        assert level.summary["output_tokens"] == server["generation_tokens"] == 12 * MAX_TOKENS
        assert server["accept_length_source"] == "counters"
        assert server["accept_length"] == pytest.approx(expected, rel=0.05)
        assert level.summary["requests"]["failed"] == 0
    await stop_verified(instance)


# How far the comparison's ratio (the client's output tokens per second over each level) may be
# from the same ratio by the servers' counters over their scrape-to-scrape interval: the two
# intervals differ by the scrapes at each end (tens of ms on levels of a few seconds).
RATIO_AGREEMENT = 0.05


def _server_tok_s(experiment_id: int) -> list[dict[int, float]]:
    """Per arm (A first), concurrency -> the server's generation tokens over its own interval."""
    out = []
    steps = ExperimentStep.objects.filter(experiment_id=experiment_id).order_by("arm__position")
    for step in steps:
        sweep = Sweep.objects.get(experiment_step=step)
        by_level = {}
        for level in _levels(sweep.pk):
            server = level.server_metrics
            assert server["available"] and server["duration_s"] > 0, server
            assert server["generation_tokens"] == level.summary["output_tokens"]
            by_level[level.concurrency] = server["generation_tokens"] / server["duration_s"]
        out.append(by_level)
    return out


def _steps(experiment_id: int) -> list[ExperimentStep]:
    return list(ExperimentStep.objects.filter(experiment_id=experiment_id).order_by("index"))


async def test_experiment_baseline_against_draft_has_identical_outputs_and_names_llamacpp_options(
    worker: Worker, llamacpp_profile: Callable[..., ServerProfile]
) -> None:
    baseline = await sync_to_async(llamacpp_profile)(None, name="llama.cpp baseline")
    draft = await sync_to_async(llamacpp_profile)(AGREEMENTS[0], name="llama.cpp draft")
    load = {"api": "completions", "requests_per_level": 16, "max_tokens": MAX_TOKENS,
            "input_tokens": 6, "temperature": 0.0}  # fmt: skip
    experiment = await sync_to_async(experiment_services.experiment_create)(
        profiles=[baseline, draft],
        levels=[1, 2],
        load=load,
        check_output_equivalence=True,
        repeats=1,
    )
    await until(lambda: Experiment.objects.get(pk=experiment.pk).is_finished, timeout=INNER_WAIT_S)
    experiment = await Experiment.objects.aget(pk=experiment.pk)
    assert experiment.state == ExperimentState.COMPLETED, experiment.reason
    steps = await sync_to_async(_steps)(experiment.pk)
    assert [s.state for s in steps] == [StepState.DONE, StepState.DONE]
    comparison = experiment.comparison
    eq = comparison["equivalence"]
    assert eq["checked"] and eq["flagged"] == []
    assert [p["equivalent"] for p in eq["profiles"]] == [True, True]
    texts = [s.equivalence["outputs"][0]["text"] for s in steps]
    assert texts[0] and texts[0] == texts[1]
    (verdict,) = comparison["verdicts"]
    # The ratio against the servers' own counters: per arm and level, the generation tokens the
    # server counted over the server-side interval of that level (scrape to scrape).
    server_tps = await sync_to_async(_server_tok_s)(experiment.pk)
    assert len(server_tps) == 2
    ratios = {r["concurrency"]: r for r in verdict["ratios"]}
    assert sorted(ratios) == [1, 2]
    for concurrency, ratio in ratios.items():
        by_server = server_tps[1][concurrency] / server_tps[0][concurrency]
        assert ratio["point"] == pytest.approx(by_server, rel=RATIO_AGREEMENT), (
            concurrency, ratio, by_server,
        )  # fmt: skip
    # Each level's status follows from the interval it states (docs/measurement.md): ahead only
    # with the whole interval above 1, behind only with it below 1, and a level whose interval
    # holds 1 is never settled.
    decision = verdict["decision"]
    statuses = []
    for level in decision["levels"]:
        low, high, status = level["ratio"]["low"], level["ratio"]["high"], level["status"]
        statuses.append(status)
        if status == "ahead":
            assert low is not None and low > 1.0, level
        elif status == "behind":
            assert high is not None and high < 1.0, level
        elif low is not None and high is not None and low <= 1.0 <= high:
            assert status in ("equivalent", "inconclusive", "not_comparable"), level
    # The advice follows from the statuses by the documented rule, worked out here again:
    # speculation on where the draft arm is ahead, off where it is behind or equivalent, no
    # advice where a level settles nothing; "off above C=1" only for on-then-off, "serve
    # without" only for off everywhere.
    action = {"ahead": "on", "behind": "off", "equivalent": "off"}
    actions = [action.get(s, "none") for s in statuses]
    expected_above = {"off off": 0, "on off": 1}.get(" ".join(actions))
    assert verdict["disable_speculation_above"] == expected_above, (statuses, verdict)
    text = verdict["text"]
    # Whatever the load made of the ratios (on a quiet machine speculation pays at C=1 and not
    # at C=2; on a loaded one either can move), the advice is about the engine under test:
    # llama.cpp's options, nobody else's.
    assert "--spec-type" in text and "--spec-draft-n-max" in text, text
    if decision["engine_options"]:
        assert {o["engine"] for o in decision["engine_options"]} == {"llama.cpp"}
        assert "llama.cpp --spec-type none on the server for loads above C=" in text
    else:
        assert "(llama.cpp: --spec-type, --spec-draft-n-max)" in decision["recommendation"]
    assert "vLLM" not in text and "SGLang" not in text and "TensorRT-LLM" not in text


# A target whose next-token distribution is flat enough that llama-server's default sampling
# chain (top_k 40, top_p 0.95, min_p 0.05) leaves other tokens to sample at temperature 1: at the
# default scale (4.0) and down to 0.3 the greedy token holds all but all of the mass and min_p
# removes the rest, so a sampled request accepts exactly what a greedy one does (measured:
# 42 of 62 drafted tokens per 64-token request both ways). At 0.2: 42/62 greedy, about 10-15 of
# 140-155 sampled. The greedy choice (and so the greedy expectation) is the same at any scale.
FLAT_TARGET_SCALE = 0.2


async def test_a_sampled_arm_accepts_fewer_drafts_than_a_greedy_arm_of_the_same_profile(
    worker: Worker, local_host: Host, llama_server_bin: Path, tmp_path: Path
) -> None:
    pair = write_pair(tmp_path / "flat", agreement=AGREEMENTS[0], target_scale=FLAT_TARGET_SCALE)
    port = free_port()
    argv = llamacpp_argv(
        str(llama_server_bin), str(pair.target), port=port, draft=str(pair.draft),
        draft_n_max=N_MAX, slots=4, context=4 * 512, threads=THREADS,
    )  # fmt: skip
    profile = await ServerProfile.objects.acreate(
        name="llama.cpp flat draft", engine=Engine.LLAMACPP, host=local_host, launch_argv=argv,
        port=port, gpu_ids=[], readiness_timeout_s=120, speculative=True,
        metrics_path="/metrics", readiness_path="/health",
    )  # fmt: skip
    load = {"api": "completions", "requests_per_level": 8, "max_tokens": MAX_TOKENS,
            "input_tokens": 6}  # fmt: skip
    experiment = await sync_to_async(experiment_services.experiment_create)(
        profiles=[profile, profile], levels=[1], load=load, repeats=1,
        arm_loads=[{"temperature": 0.0}, {"temperature": 1.0}],
    )  # fmt: skip
    await until(lambda: Experiment.objects.get(pk=experiment.pk).is_finished, timeout=INNER_WAIT_S)
    experiment = await Experiment.objects.aget(pk=experiment.pk)
    assert experiment.state == ExperimentState.COMPLETED, experiment.reason
    assert experiment.comparison["declared_axis"] == ["load: temperature"]
    server: dict[str, dict[str, Any]] = {}
    for step in await sync_to_async(_steps)(experiment.pk):
        sweep = await Sweep.objects.aget(experiment_step=step)
        (level,) = await sync_to_async(_levels)(sweep.pk)
        label = await sync_to_async(lambda s=step: s.arm.label)()
        server[label] = level.server_metrics
        assert sweep.load["temperature"] == {"A": 0.0, "B": 1.0}[label]
    # The server's own counters (llama-server /metrics over each level).
    for label in ("A", "B"):
        assert server[label]["available"] and server[label]["accept_length_source"] == "counters"
    expected = pair.expected(n_max=N_MAX, max_tokens=MAX_TOKENS).accept_length
    assert server["A"]["accept_length"] == pytest.approx(expected, rel=0.05)
    # Sampled: the target's sampled token often is not the draft's, so far fewer drafts pass.
    assert server["B"]["accept_length"] < 0.8 * server["A"]["accept_length"], server
