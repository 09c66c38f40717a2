"""Server instances over the API: start (202 + job), conflicts (409), stop, history, log."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from core.models import Job
from hosts.models import InstanceState, ServerInstance
from hosts.services import instance_transition
from tests.specdash.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db


def test_start_answers_202_with_the_instance_and_its_job(
    as_operator: ApiClient, make_profile: Any
) -> None:
    profile = make_profile(gpu_ids=[0])
    response = as_operator.post(f"/api/v1/profiles/{profile.pk}/start")
    assert response.status_code == 202
    body = response.json()
    instance = ServerInstance.objects.get()
    job = Job.objects.get()
    assert body["instance"]["id"] == instance.pk and body["instance"]["state"] == "starting"
    assert body["job_url"] == f"/api/v1/jobs/{job.pk}"
    assert (body["job"]["kind"], body["job"]["params"]) == (
        "server.run",
        {"instance_id": instance.pk},
    )
    polled = as_operator.get(body["job_url"]).json()
    assert (polled["id"], polled["state"], polled["finished"]) == (job.pk, "queued", False)
    assert as_operator.get(body["instance"]["url"]).json()["state"] == "starting"


def test_starting_on_a_busy_port_is_a_409(as_operator: ApiClient, make_profile: Any) -> None:
    first = make_profile(port=31500)
    second = make_profile(port=31500)
    assert as_operator.post(f"/api/v1/profiles/{first.pk}/start").status_code == 202
    response = as_operator.post(f"/api/v1/profiles/{second.pk}/start")
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "conflict" and "Port 31500" in error["message"]
    assert ServerInstance.objects.count() == 1


def test_starting_on_busy_gpus_is_a_409_naming_the_holder(
    as_operator: ApiClient, make_profile: Any
) -> None:
    first = make_profile(gpu_ids=[0, 1])
    second = make_profile(gpu_ids=[1, 2])
    holder = as_operator.post(f"/api/v1/profiles/{first.pk}/start").json()["instance"]["id"]
    response = as_operator.post(f"/api/v1/profiles/{second.pk}/start")
    assert response.status_code == 409
    assert f"GPU 1 by #{holder}" in error_of(response)["message"]


def test_start_of_a_missing_profile_is_a_404(as_operator: ApiClient) -> None:
    response = as_operator.post("/api/v1/profiles/9999/start")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_stop_answers_202_and_marks_the_stop(
    as_operator: ApiClient, make_profile: Any, make_instance: Any
) -> None:
    instance = make_instance(make_profile())
    response = as_operator.post(f"/api/v1/instances/{instance.pk}/stop")
    assert response.status_code == 202
    instance.refresh_from_db()
    assert instance.stop_requested
    assert response.json()["instance"]["stop_requested"] is True


def test_stop_of_an_orphaned_dirty_instance_queues_a_stop_job(
    as_operator: ApiClient, make_profile: Any, make_instance: Any
) -> None:
    instance = make_instance(make_profile(), state=InstanceState.DIRTY)
    body = as_operator.post(f"/api/v1/instances/{instance.pk}/stop").json()
    assert body["job"]["kind"] == "server.stop"
    assert body["job_url"] == f"/api/v1/jobs/{body['job']['id']}"


def test_the_state_history_and_log_tail(
    as_viewer: ApiClient, make_profile: Any, make_instance: Any
) -> None:
    instance = make_instance(make_profile(), state=InstanceState.STARTING)
    instance_transition(instance_id=instance.pk, state="loading", message="launched")
    instance_transition(instance_id=instance.pk, state="ready", message="healthy")
    ServerInstance.objects.filter(pk=instance.pk).update(log_tail="one\ntwo\nthree\n")
    events = as_viewer.get(f"/api/v1/instances/{instance.pk}/events").json()
    assert [e["state"] for e in events["items"]] == ["loading", "ready"]
    assert events["items"][1]["message"] == "healthy"
    log = as_viewer.get(f"/api/v1/instances/{instance.pk}/log", lines=2).json()
    assert (log["state"], log["lines"]) == ("ready", ["two", "three"])


def test_instances_filter_by_profile_state_tag_and_time(
    as_viewer: ApiClient, make_profile: Any, make_instance: Any
) -> None:
    base = make_profile(tags=["baseline"])
    eagle = make_profile(tags=["eagle3"])
    old = make_instance(base, state=InstanceState.STOPPED)
    ServerInstance.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=3))
    ready = make_instance(eagle)

    def ids(**params: Any) -> list[int]:
        return [i["id"] for i in as_viewer.get("/api/v1/instances", **params).json()["items"]]

    assert ids() == [ready.pk, old.pk]
    assert ids(profile=base.pk) == [old.pk]
    assert ids(state="ready") == [ready.pk]
    assert ids(tag="eagle3") == [ready.pk]
    since = (timezone.now() - timedelta(days=1)).isoformat()
    assert ids(created_after=since) == [ready.pk]
    assert ids(created_before=since) == [old.pk]


def test_an_unknown_state_filter_is_a_validation_error(as_viewer: ApiClient) -> None:
    response = as_viewer.get("/api/v1/instances", state="exploded")
    assert response.status_code == 422
    assert "query.state" in error_of(response)["fields"]


def test_kill_holders_only_kills_listed_processes_of_a_dirty_instance(
    as_operator: ApiClient, make_profile: Any, make_instance: Any
) -> None:
    holders = [{"pid": 4242, "start_time": 99}]
    dirty = make_instance(make_profile(), state=InstanceState.DIRTY, evidence={"holders": holders})
    url = f"/api/v1/instances/{dirty.pk}/kill-holders"
    unlisted = as_operator.post(url, {"holders": [{"pid": 1, "start_time": 1}], "confirm": True})
    assert unlisted.status_code == 422 and "body.holders" in error_of(unlisted)["fields"]
    unconfirmed = as_operator.post(url, {"holders": holders, "confirm": False})
    assert "body.confirm" in error_of(unconfirmed)["fields"]
    accepted = as_operator.post(url, {"holders": holders, "confirm": True})
    assert accepted.status_code == 202
    assert accepted.json()["job"]["params"] == {"instance_id": dirty.pk, "holders": holders}


def test_kill_holders_of_a_clean_instance_is_a_409(
    as_operator: ApiClient, make_profile: Any, make_instance: Any
) -> None:
    holders = [{"pid": 4242, "start_time": 99}]
    ready = make_instance(make_profile(), evidence={"holders": holders})
    response = as_operator.post(
        f"/api/v1/instances/{ready.pk}/kill-holders", {"holders": holders, "confirm": True}
    )
    assert response.status_code == 409
    assert error_of(response)["code"] == "invalid_state"
