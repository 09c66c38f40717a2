"""A rate sweep (several request rates under one concurrency cap) over the API, the forms and the
management command, down to the load generator's own argv and level plan."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError, call_command

from benchlib.loadgen.cli_args import build_parser
from benchlib.loadgen.level_config import level_plan
from benchmarks.experiments import selectors as exp_selectors
from benchmarks.experiments.models import Experiment
from benchmarks.sweeps import recording, selectors, services
from benchmarks.sweeps.forms import LoadPlanForm
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepState
from benchmarks.sweeps.runner import loadgen_argv
from specdash.api.client import SpecdashClient
from tests.benchmarks.experiments.constructed import make_sweep
from tests.specdash.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def ready(make_profile: Any, make_instance: Any) -> Any:
    return make_instance(make_profile(served_model_name="sim"))


def _levels_of(argv: list[str]) -> list[tuple[int, float | None]]:
    """The levels the load generator runs for this argv, by its own parser and plan."""
    args = build_parser().parse_args(argv[3:])
    return level_plan(args.concurrency, args.request_rate)


def test_a_rate_list_is_stored_and_becomes_one_level_per_rate_in_the_load_generator(
    as_operator: ApiClient, ready: Any, tmp_path: Any
) -> None:
    load = {"requests_per_level": 8, "request_rate": [0.5, 1, 4], "burstiness": 0.5}
    response = as_operator.post(
        "/api/v1/sweeps", {"instance_id": ready.pk, "levels": [16], "load": load}
    )
    assert response.status_code == 202, response.content
    sweep = Sweep.objects.get()
    assert sweep.levels == [16] and sweep.load["request_rate"] == [0.5, 1.0, 4.0]
    argv = loadgen_argv(
        base_url="http://127.0.0.1:1", model="m", levels=sweep.levels, load=sweep.load,
        records_path=tmp_path / "r.jsonl",
    )  # fmt: skip
    assert "--request-rate 0.5,1.0,4.0 --burstiness 0.5" in " ".join(argv)
    assert _levels_of(argv) == [(16, 0.5), (16, 1.0), (16, 4.0)]
    progress = as_operator.get(f"/api/v1/sweeps/{sweep.pk}").json()["progress"]
    assert progress["level_count"] == 3


def test_one_rate_in_a_list_is_one_rate_for_every_level(as_operator: ApiClient, ready: Any) -> None:
    load = {"requests_per_level": 8, "request_rate": [2]}
    response = as_operator.post(
        "/api/v1/sweeps", {"instance_id": ready.pk, "levels": [1, 4], "load": load}
    )
    assert response.status_code == 202, response.content
    sweep = Sweep.objects.get()
    assert sweep.load["request_rate"] == 2.0
    assert selectors.sweep_progress(sweep=sweep, levels=[])["level_count"] == 2


@pytest.mark.parametrize(
    ("levels", "rate", "field", "words"),
    [
        ([4], [], "request_rate", "at least one request rate"),
        ([4], [1, 0], "request_rate", "above 0"),
        ([4], [-2, 1], "request_rate", "above 0"),
        ([4], 0, "request_rate", "above 0"),
        ([1, 2], [1, 2], "levels", "one concurrency"),
    ],
)
def test_bad_rate_lists_are_422_naming_the_field(
    as_operator: ApiClient, ready: Any, levels: list[int], rate: Any, field: str, words: str
) -> None:
    load = {"requests_per_level": 8, "request_rate": rate}
    response = as_operator.post(
        "/api/v1/sweeps", {"instance_id": ready.pk, "levels": levels, "load": load}
    )
    assert response.status_code == 422, response.content
    messages = error_of(response)["fields"].get(field)
    assert messages and words in " ".join(messages), response.content
    assert not Sweep.objects.exists()


def test_an_experiment_refuses_a_rate_sweep_but_takes_one_rate(
    as_operator: ApiClient, make_profile: Any
) -> None:
    a, b = make_profile(name="a"), make_profile(name="b")
    body = {"profiles": [a.pk, b.pk], "levels": [8]}
    sweep_of_rates = {"requests_per_level": 4, "request_rate": [1, 2]}
    refused = as_operator.post("/api/v1/experiments", {**body, "load": sweep_of_rates})
    assert refused.status_code == 422, refused.content
    assert "level by level" in error_of(refused)["fields"]["request_rate"][0]
    zero = as_operator.post(
        "/api/v1/experiments", {**body, "load": {"requests_per_level": 4, "request_rate": [0]}}
    )
    assert zero.status_code == 422 and "request_rate" in error_of(zero)["fields"]
    assert not Experiment.objects.exists()
    one = as_operator.post(
        "/api/v1/experiments", {**body, "load": {"requests_per_level": 4, "request_rate": 2}}
    )
    assert one.status_code == 202, one.content
    assert Experiment.objects.get().load["request_rate"] == 2.0


def test_the_form_reads_a_rate_list_and_shows_bad_rates_on_the_field() -> None:
    data = {"levels": "8", "requests_per_level": "10", "input_tokens": "64",
            "max_tokens": "32", "api": "completions", "burstiness": "1"}  # fmt: skip
    form = LoadPlanForm(data={**data, "request_rate": "0.5, 1 2"})
    assert form.is_valid(), form.errors
    assert form.plan_kwargs()["load"]["request_rate"] == [0.5, 1.0, 2.0]
    single = LoadPlanForm(data={**data, "request_rate": "3"})
    assert single.is_valid() and single.plan_kwargs()["load"]["request_rate"] == 3.0
    closed = LoadPlanForm(data={**data, "request_rate": ""})
    assert closed.is_valid() and closed.plan_kwargs()["load"]["request_rate"] is None
    words = LoadPlanForm(data={**data, "request_rate": "fast"})
    assert not words.is_valid() and "numbers separated by commas" in words.errors["request_rate"][0]


def test_the_sweep_form_shows_the_services_rate_errors_next_to_their_fields(
    client: Any, operator: Any, ready: Any
) -> None:
    client.force_login(operator)
    data = {"instance": ready.pk, "levels": "1, 2", "requests_per_level": "10",
            "warmup_requests": "0", "input_tokens": "8", "max_tokens": "4", "api": "completions",
            "burstiness": "1", "prompt_set": "synthetic", "slo_scope": "p99"}  # fmt: skip
    response = client.post("/sweeps/new/", {**data, "request_rate": "1, 2"})
    assert response.status_code == 400
    assert "one concurrency" in " ".join(response.context["form"].errors["levels"])
    assert 'data-testid="error-levels"' in response.content.decode()
    response = client.post("/sweeps/new/", {**data, "levels": "4", "request_rate": "1, 0"})
    assert response.status_code == 400
    assert "above 0" in " ".join(response.context["form"].errors["request_rate"])
    assert 'data-testid="error-request_rate"' in response.content.decode()
    assert not Sweep.objects.exists()
    response = client.post("/sweeps/new/", {**data, "levels": "4", "request_rate": "1, 3"})
    assert response.status_code == 302
    assert Sweep.objects.get().load["request_rate"] == [1.0, 3.0]


def test_a_resumed_rate_sweep_runs_the_rates_it_had_left(ready: Any, tmp_path: Any) -> None:
    sweep = services.sweep_create(
        instance=ready, levels=[8], load={"requests_per_level": 4, "request_rate": [1, 2, 4]}
    )
    Sweep.objects.filter(pk=sweep.pk).update(state=SweepState.INTERRUPTED, attempts=1)
    SweepLevel.objects.create(sweep=sweep, index=0, concurrency=8, state=LevelState.COMPLETED)
    resumed = services.sweep_resume(sweep=sweep)
    assert "from level 2 (2 req/s)" in resumed.reason
    plan = recording.sweep_begin(sweep_id=sweep.pk, resume_from=1)
    assert plan is not None
    argv = loadgen_argv(
        base_url=plan.base_url, model="m", levels=plan.levels, load=plan.load,
        records_path=tmp_path / "r.jsonl", level_index_base=plan.level_offset,
    )  # fmt: skip
    assert _levels_of(argv) == [(8, 2.0), (8, 4.0)]
    assert argv[argv.index("--level-index-base") + 1] == "1"


def test_the_management_command_sends_a_rate_list_as_the_load_generator_writes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[Any] = []

    def post(self: Any, path: str, body: Any = None) -> Any:
        sent.append((path, body))
        return {"sweep": {"id": 1, "state": "queued"}}

    monkeypatch.setattr(SpecdashClient, "post", post)
    call_command("specdash", "--token", "t", "sweep", "3", "--levels", "16",
                 "--request-rate", "0.5,1,2", "--burstiness", "0.25")  # fmt: skip
    path, body = sent[0]
    assert path == "/sweeps" and body["levels"] == [16]
    assert body["load"]["request_rate"] == [0.5, 1.0, 2.0]
    assert body["load"]["burstiness"] == 0.25
    with pytest.raises(CommandError, match="request rates must be positive"):
        call_command("specdash", "--token", "t", "sweep", "3", "--levels", "16",
                     "--request-rate", "1,0")  # fmt: skip


def test_the_experiment_form_shows_a_refused_rate_list_on_its_field(
    client: Any, operator: Any, make_profile: Any
) -> None:
    client.force_login(operator)
    a, b = make_profile(name="a"), make_profile(name="b")
    data = {"profile_a": a.pk, "profile_b": b.pk, "levels": "8", "requests_per_level": "10",
            "input_tokens": "16", "max_tokens": "8", "api": "completions", "repeats": "1",
            "order": "sequential", "warmup_requests": "0", "request_rate": "1, 2"}  # fmt: skip
    response = client.post("/experiments/new/", data)
    assert response.status_code == 400
    assert "level by level" in " ".join(response.context["form"].errors["request_rate"])
    response = client.post("/experiments/new/", {**data, "request_rate": "-1"})
    assert response.status_code == 400
    assert "above 0" in " ".join(response.context["form"].errors["request_rate"])
    assert not Experiment.objects.exists()
    response = client.post("/experiments/new/", {**data, "request_rate": "2"})
    assert response.status_code == 302 and Experiment.objects.get().load["request_rate"] == 2.0


def _finished_rate_sweep(profile: Any) -> Sweep:
    sweep = Sweep.objects.create(
        profile=profile, levels=[16], load={"request_rate": [1.0, 2.0]},
        state=SweepState.COMPLETED,
    )  # fmt: skip
    for i in range(2):
        SweepLevel.objects.create(
            sweep=sweep, index=i, concurrency=16, state=LevelState.COMPLETED, output_tok_s=100.0
        )
    return sweep


def test_comparisons_refuse_rate_sweeps_and_the_picker_and_history_leave_them_out(
    as_viewer: ApiClient, client: Any, viewer: Any, make_profile: Any, tmp_path: Any
) -> None:
    profile = make_profile(name="p")
    rate = _finished_rate_sweep(profile)
    closed = make_sweep(profile, {1: 90.0, 4: 300.0}, tmp=tmp_path)
    refused = as_viewer.get("/api/v1/comparisons", sweep=[closed.pk, rate.pk])
    assert refused.status_code == 422, refused.content
    assert error_of(refused)["fields"]["query.sweep"] == [f"Sweep #{rate.pk} is a rate sweep."]
    client.force_login(viewer)
    page = client.get("/compare/", {"sweeps": [closed.pk, rate.pk]}).content.decode()
    assert f"#{rate.pk}: a rate sweep cannot be compared" in page
    assert [s.pk for s in exp_selectors.comparable_sweeps()] == [closed.pk]
    history = exp_selectors.profile_history_runs(profile_id=profile.pk)
    assert [run.sweep_id for run in history] == [closed.pk]
