"""The experiment websocket: the snapshot first, then each step and state change."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from benchmarks.experiments import recording, services
from benchmarks.experiments.models import StepState
from tests.benchmarks.test_consumer import _connect, _session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_viewer_gets_the_experiment_then_its_step_and_state_events(
    viewer: Any, make_profile: Any
) -> None:
    profiles = [await sync_to_async(make_profile)() for _ in range(2)]
    experiment = await sync_to_async(services.experiment_create)(
        profiles=profiles, levels=[1], load={"requests_per_level": 5}
    )
    cookie = await sync_to_async(_session_cookie)(viewer)
    communicator, connected, _ = await _connect(f"/ws/experiments/{experiment.pk}/", cookie)
    assert connected
    snapshot = await communicator.receive_json_from(timeout=10)
    assert snapshot["type"] == "snapshot"
    assert snapshot["experiment"]["state"] == "queued"
    assert [s["label"] for s in snapshot["steps"]] == ["A", "B", "B", "A"]
    plan = await sync_to_async(recording.experiment_begin)(experiment_id=experiment.pk)
    assert plan is not None
    state = await communicator.receive_json_from(timeout=10)
    assert state["type"] == "experiment.state" and state["experiment"]["state"] == "running"
    await sync_to_async(recording.experiment_step_update)(
        step_id=plan.steps[0].step_id, state=StepState.STARTING
    )
    step = await communicator.receive_json_from(timeout=10)
    assert step["type"] == "experiment.step" and step["experiment_id"] == experiment.pk
    assert step["step"]["state"] == "starting" and step["step"]["started_at"] is not None
    await communicator.disconnect()


async def test_an_unknown_experiment_closes_the_socket(viewer: Any) -> None:
    cookie = await sync_to_async(_session_cookie)(viewer)
    _communicator, connected, code = await _connect("/ws/experiments/999999/", cookie)
    assert not connected and code == 4404
