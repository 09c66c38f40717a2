from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from benchmarks.sweeps import recording, services
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepSample, SweepState
from core import realtime
from core.models import Job, JobState
from hosts.models import Host, InstanceState, ServerInstance
from tests.benchmarks.conftest import level_summary_event, load, sample_event

pytestmark = pytest.mark.django_db


def test_create_snapshots_the_environment_and_queues_one_locked_job(
    ready_instance: ServerInstance, operator: Any
) -> None:
    sweep = services.sweep_create(
        instance=ready_instance, levels=[1, 2, 2, 5, 1], load=load(), name=" A/B base ",
        notes="n", tags=["x", " x", "y"], user=operator,
    )  # fmt: skip
    assert sweep.levels == [1, 2, 5]
    assert sweep.state == SweepState.QUEUED
    assert sweep.name == "A/B base" and sweep.tags == ["x", "y"]
    assert sweep.profile == ready_instance.profile and sweep.created_by == operator
    env = sweep.environment
    assert env["target"] == {"base_url": ready_instance.base_url, "model": "sim-model"}
    assert env["instance"]["launch_argv"] == ready_instance.launch_argv
    assert env["instance"]["gpu_ids"] == [0, 1]
    assert env["instance"]["server_info"] == {"version": "sim-1.0"}
    assert env["instance"]["env"]["HF_TOKEN"] == "***"  # secrets are not copied
    assert env["profile"]["name"] == ready_instance.profile.name
    job = Job.objects.get()
    assert sweep.job == job
    assert (job.kind, job.params, job.lock_key, job.state) == (
        "sweep.run", {"sweep_id": sweep.pk}, f"sweep:{sweep.pk}", JobState.QUEUED,
    )  # fmt: skip
    assert sweep.load == {
        "api": "completions", "model": "", "ignore_eos": False, "requests_per_level": 20,
        "duration": None, "warmup_requests": 0, "input_tokens": 8, "max_tokens": 4,
        "temperature": None, "request_timeout": 600.0, "prompt_set": "synthetic", "slo": None,
        "request_rate": None, "burstiness": 1.0, "session_turns": 0, "turn_tokens": 32,
        "think_time": 0.0, "ramp": "", "ramp_start_rate": None, "ramp_slices": 10,
        "controller_tracking": False,
        "prefix_count": 0, "prefix_tokens": 512, "prefix_share": 1.0, "trace": "",
        "trace_format": "mooncake", "trace_speed": 1.0, "trace_start": 0.0,
        "trace_duration": None,
    }  # fmt: skip


def test_create_refuses_an_instance_that_is_not_ready(ready_instance: ServerInstance) -> None:
    ServerInstance.objects.filter(pk=ready_instance.pk).update(state=InstanceState.LOADING)
    with pytest.raises(ValidationError) as info:
        services.sweep_create(instance=ready_instance, levels=[1], load=load())
    assert "not ready" in info.value.message_dict["instance"][0]
    assert not Sweep.objects.exists() and not Job.objects.exists()


def test_two_long_tags_sharing_their_first_50_characters_are_stored_once(
    ready_instance: ServerInstance,
) -> None:
    common = "x" * 50
    sweep = services.sweep_create(
        instance=ready_instance, levels=[1], load=load(),
        tags=[common + "-cuda12", f" {common}-cuda13", "short"],
    )  # fmt: skip
    assert sweep.tags == [common, "short"]


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        ([], "at least one"),
        ([0, 1], "outside 1 to 4096"),
        ([1, 5000], "outside 1 to 4096"),
        ([1, 2.5], "not a whole number"),
        ([True], "not a whole number"),
    ],
)
def test_levels_must_be_positive_whole_numbers_up_to_the_limit(
    ready_instance: ServerInstance, levels: list[Any], message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        services.sweep_create(instance=ready_instance, levels=levels, load=load())
    assert message in info.value.message_dict["levels"][0]


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"api": "grpc"}, "api", "Choose one of"),
        ({"requests_per_level": None}, "requests_per_level", "one of the two"),
        ({"duration": 10}, "requests_per_level", "one of the two"),
        ({"requests_per_level": 0}, "requests_per_level", "between 1"),
        ({"max_tokens": 0}, "max_tokens", "between 1"),
        ({"input_tokens": 10**7}, "input_tokens", "between 1"),
        ({"temperature": 3}, "temperature", "between 0"),
        ({"warmup_requests": 1.5}, "warmup_requests", "whole number"),
        ({"max_tokens": "many"}, "max_tokens", "Enter a number"),
    ],
)
def test_load_settings_are_validated_with_errors_per_field(
    ready_instance: ServerInstance, overrides: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        services.sweep_create(instance=ready_instance, levels=[1], load=load(**overrides))
    assert message in " ".join(info.value.message_dict[field])


def test_unknown_load_settings_are_refused(ready_instance: ServerInstance) -> None:
    with pytest.raises(ValidationError, match="Unknown load setting"):
        services.sweep_create(instance=ready_instance, levels=[1], load=load(shell="rm -rf /"))


def test_a_base_url_target_needs_an_http_url(local_host: Host) -> None:
    # The local host registered: loopback is a registered host's address (sweeps/targets.py).
    with pytest.raises(ValidationError) as info:
        services.sweep_create(base_url="ftp://x", levels=[1], load=load())
    assert "base_url" in info.value.message_dict
    sweep = services.sweep_create(base_url="http://127.0.0.1:9/", levels=[1], load=load(model="m"))
    assert sweep.base_url == "http://127.0.0.1:9"
    assert sweep.environment["target"]["model"] == "m"


def test_cancel_of_a_queued_sweep_is_immediate(
    ready_instance: ServerInstance,
    operator: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1], load=load())
    sent: list[tuple[str, str, dict[str, Any]]] = []
    monkeypatch.setattr(realtime, "broadcast", lambda *args: sent.append(args))
    with django_capture_on_commit_callbacks(execute=True):
        sweep = services.sweep_cancel(sweep=sweep, user=operator)
    assert sweep.state == SweepState.CANCELLED and sweep.finished_at is not None
    assert sweep.reason == "cancelled by op before it started"
    assert Job.objects.get().state == JobState.CANCELLED
    assert [(g, t) for g, t, _ in sent] == [(f"sweep-{sweep.pk}", "sweep.state")]
    assert sent[0][2]["sweep"]["state"] == "cancelled"
    # a second cancel changes nothing
    assert services.sweep_cancel(sweep=sweep, user=operator).reason == sweep.reason


def test_cancel_of_a_running_sweep_asks_its_job(
    ready_instance: ServerInstance, operator: Any
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1], load=load())
    Job.objects.filter(pk=sweep.job_id or 0).update(state=JobState.RUNNING)
    assert recording.sweep_begin(sweep_id=sweep.pk) is not None
    sweep = services.sweep_cancel(sweep=Sweep.objects.get(pk=sweep.pk), user=operator)
    assert sweep.state == SweepState.RUNNING  # the job finishes it
    assert Job.objects.get().cancel_requested
    recording.sweep_finish(sweep_id=sweep.pk, state=SweepState.CANCELLED, reason="cancelled")
    assert Sweep.objects.get(pk=sweep.pk).reason == "cancelled by op"


def test_level_summary_fills_the_denormalised_columns(ready_instance: ServerInstance) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1, 4], load=load())
    recording.sweep_level_started(sweep_id=sweep.pk, index=1, concurrency=4, t=1_700_000_000.5)
    level = recording.sweep_level_finished(
        sweep_id=sweep.pk, summary=level_summary_event(1, 4, ok=9, failed=1)["summary"]
    )
    level.refresh_from_db()
    assert level.state == LevelState.COMPLETED and level.concurrency == 4
    assert level.started_at is not None and level.started_at.timestamp() == 1_700_000_000.5
    assert (level.requests_ok, level.requests_failed) == (9, 1)
    assert level.output_tok_s == 500.0 and level.steady_output_tok_s == pytest.approx(550.0)
    assert (level.ttft_p50_ms, level.ttft_p99_ms) == (20.0, 40.0)
    assert (level.tpot_p50_ms, level.itl_p50_ms, level.itl_p99_ms) == (3.0, 2.5, 5.0)
    assert level.e2e_p50_ms == 400.0 and level.achieved_concurrency == pytest.approx(3.8)
    assert level.summary["mean_tokens_per_chunk"] == 2.0 and level.reason == ""
    assert Sweep.objects.get(pk=sweep.pk).current_level_index == 1


def test_finishing_a_sweep_turns_its_running_level_partial(ready_instance: ServerInstance) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1, 4], load=load())
    recording.sweep_begin(sweep_id=sweep.pk)
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=level_summary_event(0, 1)["summary"])
    recording.sweep_level_started(sweep_id=sweep.pk, index=1, concurrency=4, t=1.0)
    assert recording.sweep_finish(sweep_id=sweep.pk, state=SweepState.FAILED, reason="boom")
    assert not recording.sweep_finish(sweep_id=sweep.pk, state=SweepState.COMPLETED)
    states = dict(SweepLevel.objects.values_list("index", "state"))
    assert states == {0: LevelState.COMPLETED, 1: LevelState.PARTIAL}
    assert SweepLevel.objects.get(index=1).reason == "boom"
    assert Sweep.objects.get(pk=sweep.pk).state == SweepState.FAILED


def test_begin_fails_a_sweep_whose_server_stopped_being_ready(
    ready_instance: ServerInstance,
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1], load=load())
    ServerInstance.objects.filter(pk=ready_instance.pk).update(
        state=InstanceState.CRASHED, reason="exit 1"
    )
    assert recording.sweep_begin(sweep_id=sweep.pk) is None
    sweep.refresh_from_db()
    assert sweep.state == SweepState.FAILED and "crashed" in sweep.reason


def test_progress_estimates_the_time_left_from_durations_or_the_last_request_rate(
    ready_instance: ServerInstance,
) -> None:
    from benchmarks.sweeps import selectors

    timed = services.sweep_create(
        instance=ready_instance, levels=[1, 2, 4], load=load(requests_per_level=None, duration=10)
    )
    recording.sweep_begin(sweep_id=timed.pk)
    recording.sweep_level_finished(sweep_id=timed.pk, summary=level_summary_event(0, 1)["summary"])
    recording.sweep_level_started(sweep_id=timed.pk, index=1, concurrency=2, t=1000.0)
    timed.refresh_from_db()
    levels = selectors.sweep_levels(sweep_id=timed.pk)
    progress = selectors.sweep_progress(sweep=timed, levels=levels, now=1004.0)
    assert (progress["level_number"], progress["level_count"]) == (2, 3)
    assert progress["eta_s"] == pytest.approx(6 + 10)  # 6 s of this level, one more level

    counted = services.sweep_create(instance=ready_instance, levels=[1, 2], load=load())
    counted.refresh_from_db()
    assert selectors.sweep_progress(sweep=counted, levels=[])["eta_s"] is None  # no basis yet
    recording.sweep_level_finished(
        sweep_id=counted.pk, summary=level_summary_event(0, 1)["summary"]
    )
    levels = selectors.sweep_levels(sweep_id=counted.pk)
    # 20 requests at the last level's 5 requests/s: 4 s for the level still to run.
    assert selectors.sweep_progress(sweep=counted, levels=levels)["eta_s"] == pytest.approx(4.0)


def test_a_batch_of_samples_costs_the_same_queries_as_one_sample(
    ready_instance: ServerInstance,
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1], load=load())
    counts = []
    for size in (1, 50):
        with CaptureQueriesContext(connection) as ctx:
            recording.sweep_samples_add(
                sweep_id=sweep.pk, samples=[sample_event(0, float(i)) for i in range(size)]
            )
        counts.append(len(ctx.captured_queries))
    assert counts[0] == counts[1]
    assert SweepSample.objects.filter(sweep_id=sweep.pk).count() == 51
