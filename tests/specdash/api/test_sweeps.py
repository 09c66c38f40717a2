"""Sweeps over the API: create (202), validation, status, levels, samples, cancel, exports."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest

from benchmarks.sweeps.models import Sweep, SweepLevel, SweepSample
from benchmarks.sweeps.recording import sweep_records_file
from hosts.models import InstanceState
from tests.specdash.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db

LOAD = {"requests_per_level": 4, "max_tokens": 16}


@pytest.fixture
def ready(make_profile: Any, make_instance: Any) -> Any:
    return make_instance(make_profile(tags=["baseline"], served_model_name="sim"))


def _finished_sweep(instance: Any, values: dict[int, float]) -> Sweep:
    sweep = Sweep.objects.create(
        instance=instance, profile=instance.profile, levels=list(values), state="completed",
        tags=["nightly"],
    )  # fmt: skip
    for index, (c, tok_s) in enumerate(values.items()):
        summary = {"concurrency": c, "output_tok_s": tok_s, "duration_s": 2.0}
        SweepLevel.objects.create(
            sweep=sweep, index=index, concurrency=c, state="completed", output_tok_s=tok_s,
            summary=summary, requests_ok=4,
        )  # fmt: skip
    return sweep


def test_create_answers_202_with_the_sweep_and_its_job(as_operator: ApiClient, ready: Any) -> None:
    response = as_operator.post(
        "/api/v1/sweeps",
        {"instance_id": ready.pk, "levels": [1, 2, 2, 5], "load": LOAD, "tags": ["ci"]},
    )
    assert response.status_code == 202, response.content
    body = response.json()
    sweep = Sweep.objects.get()
    assert body["sweep"]["id"] == sweep.pk and body["sweep"]["state"] == "queued"
    assert sweep.levels == [1, 2, 5]  # the service's cleaning, not the request's list
    assert sweep.load["requests_per_level"] == 4 and sweep.load["input_tokens"] == 128
    assert body["job"]["kind"] == "sweep.run" and body["job_url"] == f"/api/v1/jobs/{sweep.job_id}"


def test_a_sweep_of_a_server_that_is_not_ready_is_refused(
    as_operator: ApiClient, make_profile: Any, make_instance: Any
) -> None:
    loading = make_instance(make_profile(), state=InstanceState.LOADING)
    response = as_operator.post(
        "/api/v1/sweeps", {"instance_id": loading.pk, "levels": [1], "load": LOAD}
    )
    assert response.status_code == 422
    assert "not ready" in error_of(response)["fields"]["instance_id"][0]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"levels": [0]}, "levels"),
        ({"levels": [1], "load": {"requests_per_level": 1, "duration": 5}}, "requests_per_level"),
        ({"levels": [1], "load": {"duration": 5, "api": "grpc"}}, "api"),
        ({"levels": [1], "load": {"requests_per_level": 1, "max_tokens": 10**9}}, "max_tokens"),
        ({"levels": [1], "load": {"requests_per_level": 1, "batch": 3}}, "body.load.batch"),
        ({"levels": ["one"]}, "body.levels.0"),
        ({"levels": []}, "body.levels"),
    ],
)
def test_invalid_sweeps_are_422_with_the_field_named(
    as_operator: ApiClient, ready: Any, body: dict[str, Any], field: str
) -> None:
    response = as_operator.post("/api/v1/sweeps", {"instance_id": ready.pk, **body})
    assert response.status_code == 422, response.content
    assert field in error_of(response)["fields"]
    assert not Sweep.objects.exists()


def test_a_body_that_is_not_json_is_a_400(as_operator: ApiClient) -> None:
    response = as_operator.client.post(
        "/api/v1/sweeps", "{levels:", content_type="application/json", headers=as_operator.headers
    )
    assert response.status_code == 400
    assert error_of(response)["code"] == "bad_request"


def test_an_unknown_instance_is_a_field_error(as_operator: ApiClient) -> None:
    response = as_operator.post("/api/v1/sweeps", {"instance_id": 777, "levels": [1], "load": LOAD})
    assert response.status_code == 422
    assert "instance_id" in error_of(response)["fields"]


def test_a_viewer_cannot_create_or_cancel(as_viewer: ApiClient, ready: Any) -> None:
    response = as_viewer.post(
        "/api/v1/sweeps", {"instance_id": ready.pk, "levels": [1], "load": LOAD}
    )
    assert response.status_code == 403
    sweep = _finished_sweep(ready, {1: 10.0})
    assert as_viewer.post(f"/api/v1/sweeps/{sweep.pk}/cancel").status_code == 403


def test_cancel_of_a_queued_sweep_is_immediate(as_operator: ApiClient, ready: Any) -> None:
    created = as_operator.post(
        "/api/v1/sweeps", {"instance_id": ready.pk, "levels": [1], "load": LOAD}
    ).json()
    response = as_operator.post(f"/api/v1/sweeps/{created['sweep']['id']}/cancel")
    assert response.status_code == 202
    assert response.json()["sweep"]["state"] == "cancelled"
    assert response.json()["job"]["state"] == "cancelled"


def test_status_levels_and_samples(as_viewer: ApiClient, ready: Any) -> None:
    sweep = _finished_sweep(ready, {1: 90.0, 2: 170.0})
    SweepSample.objects.bulk_create(
        [SweepSample(sweep=sweep, level_index=i // 3, t=float(i), data={"n": i}) for i in range(6)]
    )
    detail = as_viewer.get(f"/api/v1/sweeps/{sweep.pk}").json()
    assert detail["finished"] is True and detail["progress"]["level_count"] == 2
    levels = as_viewer.get(f"/api/v1/sweeps/{sweep.pk}/levels").json()
    assert [(lv["concurrency"], lv["output_tok_s"]) for lv in levels] == [(1, 90.0), (2, 170.0)]
    assert levels[0]["summary"]["duration_s"] == 2.0
    samples = as_viewer.get(f"/api/v1/sweeps/{sweep.pk}/samples", level=1, limit=2).json()
    assert samples["count"] == 3
    assert [s["data"]["n"] for s in samples["items"]] == [3, 4]


def test_sweeps_filter_by_profile_state_and_tag(as_viewer: ApiClient, ready: Any) -> None:
    done = _finished_sweep(ready, {1: 1.0})
    queued = Sweep.objects.create(instance=ready, profile=ready.profile, levels=[1], tags=["adhoc"])

    def ids(**params: Any) -> list[int]:
        return [s["id"] for s in as_viewer.get("/api/v1/sweeps", **params).json()["items"]]

    assert ids() == [queued.pk, done.pk]
    assert ids(state="completed") == [done.pk]
    assert ids(tag="adhoc") == [queued.pk]
    assert ids(profile=ready.profile_id) == [queued.pk, done.pk]
    assert ids(profile=ready.profile_id + 100) == []


def test_exports_csv_json_and_records(
    as_viewer: ApiClient, ready: Any, settings: Any, tmp_path: Any
) -> None:
    settings.SPECDASH_DATA_DIR = tmp_path
    sweep = _finished_sweep(ready, {1: 90.0, 2: 170.0})
    rows = list(csv.DictReader(io.StringIO(
        as_viewer.get(f"/api/v1/sweeps/{sweep.pk}/levels.csv").content.decode()
    )))  # fmt: skip
    assert [(r["concurrency"], r["output_tok_s"]) for r in rows] == [("1", "90.0"), ("2", "170.0")]
    exported = as_viewer.get(f"/api/v1/sweeps/{sweep.pk}/levels.json").json()
    assert [lv["concurrency"] for lv in exported["levels"]] == [1, 2]
    missing = as_viewer.get(f"/api/v1/sweeps/{sweep.pk}/records.jsonl")
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    path = sweep_records_file(sweep_id=sweep.pk)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"ok": True, "output_tokens": 16}) + "\n")
    Sweep.objects.filter(pk=sweep.pk).update(records_path=str(path))
    records = as_viewer.get(f"/api/v1/sweeps/{sweep.pk}/records.jsonl")
    assert records["Content-Type"] == "application/x-ndjson"
    assert json.loads(b"".join(records.streaming_content)) == {"ok": True, "output_tokens": 16}


def test_an_interrupted_sweep_is_resumed_or_abandoned_over_the_api(
    as_operator: ApiClient, as_viewer: ApiClient, ready: Any
) -> None:
    sweep = Sweep.objects.create(
        instance=ready, profile=ready.profile, levels=[1, 2], state="interrupted",
        reason="interrupted: worker gone",
    )  # fmt: skip
    SweepLevel.objects.create(sweep=sweep, index=0, concurrency=1, state="completed")
    assert as_viewer.post(f"/api/v1/sweeps/{sweep.pk}/resume").status_code == 403
    response = as_operator.post(f"/api/v1/sweeps/{sweep.pk}/resume")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["sweep"]["state"] == "queued"
    assert body["job"]["kind"] == "sweep.run"
    sweep.refresh_from_db()
    assert sweep.job is not None and sweep.job.params == {"sweep_id": sweep.pk, "resume_from": 1}
    # Only an interrupted sweep: the queued one is refused with the error shape.
    refused = as_operator.post(f"/api/v1/sweeps/{sweep.pk}/abandon")
    assert refused.status_code in {409, 422}
    assert "only an interrupted sweep" in json.dumps(error_of(refused))
    Sweep.objects.filter(pk=sweep.pk).update(state="interrupted")
    abandoned = as_operator.post(f"/api/v1/sweeps/{sweep.pk}/abandon")
    assert abandoned.status_code == 202
    assert abandoned.json()["sweep"]["state"] == "cancelled"


def test_levels_say_where_each_speculative_figure_came_from(
    as_viewer: ApiClient, ready: Any, client: Any, viewer: Any
) -> None:
    from pathlib import Path

    from hosts.telemetry.levels import level_server_metrics
    from hosts.telemetry.prometheus import parse_engine_metrics

    data = Path(__file__).parents[2] / "hosts" / "telemetry" / "data"
    # Two scrapes shaped as SGLang 0.5.23 exports them: verify calls, no accepted counter.
    before, after = (
        parse_engine_metrics((data / name).read_text(), scraped_at=t)
        for name, t in (("sglang_scrape1.prom", 0.0), ("sglang_scrape2.prom", 60.0))
    )
    sweep = _finished_sweep(ready, {4: 100.0})
    SweepLevel.objects.filter(sweep=sweep).update(
        server_metrics=level_server_metrics(before, after)
    )
    level = as_viewer.get(f"/api/v1/sweeps/{sweep.pk}/levels").json()[0]["server_metrics"]
    assert level["accept_length"] == pytest.approx(2.5)
    assert level["accept_length_source"] == "verify_counters"
    assert level["tokens_per_step_source"] == "verify_counters"
    assert (level["itl_unit"], level["ttft_resolution_s"]) == ("token", 0.1)
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert 'data-testid="level-accept-length" data-source="verify_counters"' in page
    assert "(gen - requests)/verify calls" in page
    assert 'data-testid="level-tokens-per-step" data-source="verify_counters"' in page


def test_levels_say_whether_the_ttft_quantiles_are_bucket_interpolations(
    as_viewer: ApiClient, ready: Any
) -> None:
    from hosts.telemetry.deltas import HistogramSummary, IntervalMetrics
    from hosts.telemetry.engine_profiles import Engine
    from hosts.telemetry.levels import ServerMetrics, interval_as_dict
    from specdash.api import api

    def level(p50: float) -> ServerMetrics:
        ttft = HistogramSummary(count=10, mean=p50, p50=p50, p90=p50, p99=p50)
        interval = IntervalMetrics(
            engine=Engine("sglang"), started_at=0.0, ended_at=10.0, prompt_tokens=None,
            generation_tokens=None, spec_drafts=None, spec_draft_tokens=None,
            spec_accepted_tokens=None, accept_length=None, accept_length_source=None,
            acceptance_rate=None, acceptance_rate_source=None, ttft=ttft, itl=None, e2e=None,
            ttft_resolution_s=0.1,
        )  # fmt: skip
        return interval_as_dict(interval)

    sweep = _finished_sweep(ready, {1: 100.0, 8: 400.0})
    SweepLevel.objects.filter(sweep=sweep, index=0).update(server_metrics=level(0.05))
    SweepLevel.objects.filter(sweep=sweep, index=1).update(server_metrics=level(0.4))
    levels = as_viewer.get(f"/api/v1/sweeps/{sweep.pk}/levels").json()
    assert [lv["server_metrics"]["ttft_bucket_limited"] for lv in levels] == [True, False]
    described = api.get_openapi_schema()["components"]["schemas"]["LevelOut"]["properties"]
    assert "ttft_bucket_limited" in described["server_metrics"]["description"]
