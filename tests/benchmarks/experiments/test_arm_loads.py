"""An arm's own load settings (the acceptance axes): what an experiment accepts and refuses,
what it stores, and what its comparison says the arms differ in."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.template.loader import render_to_string
from django.test import Client

from benchlib.loadgen.settings import LoadSettings
from benchmarks.experiments import axes, services
from benchmarks.experiments.decisions import workload_fingerprint
from benchmarks.experiments.level_runs import LevelRun, SeriesData
from benchmarks.experiments.models import Experiment
from hosts.models import ServerProfile
from specdash.api.client import SpecdashClient
from tests.benchmarks.experiments.test_views import FORM

pytestmark = pytest.mark.django_db

LOAD = {"requests_per_level": 5}


@pytest.fixture
def profile(make_profile: Callable[..., ServerProfile]) -> ServerProfile:
    return make_profile(name="eagle", speculative=True)


def _errors(**kwargs: Any) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        services.experiment_create(levels=[1], repeats=1, **kwargs)
    assert not Experiment.objects.exists()
    return caught.value.message_dict


def test_two_arms_of_one_profile_differ_in_their_own_temperature(profile: ServerProfile) -> None:
    experiment = services.experiment_create(
        profiles=[profile, profile], levels=[1], load=LOAD, repeats=1,
        arm_loads=[{"temperature": 0}, {"temperature": 1}],
    )  # fmt: skip
    arms = list(experiment.arms.order_by("position"))
    # Stored as the load model cleaned them (floats), and only what the arm set.
    assert [arm.load for arm in arms] == [{"temperature": 0.0}, {"temperature": 1.0}]
    assert [arm.profile_id for arm in arms] == [profile.pk, profile.pk]
    assert experiment.load["temperature"] is None  # the shared load is left as given
    assert experiment.name == "eagle (temperature 0) vs eagle (temperature 1)"
    assert axes.experiment_axes(experiment=experiment) == {
        "declared_axis": ["load: temperature"],
        "arm_loads": {
            "A": {"api": "completions", "temperature": 0.0},
            "B": {"api": "completions", "temperature": 1.0},
        },
    }


def test_a_rerun_keeps_each_arms_own_load(profile: ServerProfile) -> None:
    experiment = services.experiment_create(
        profiles=[profile, profile], levels=[1], load=LOAD, repeats=1,
        arm_loads=[{"api": "completions"}, {"api": "chat"}],
    )  # fmt: skip
    Experiment.objects.filter(pk=experiment.pk).update(state="completed")
    again = services.experiment_rerun(experiment=experiment)
    assert [a.load for a in again.arms.order_by("position")] == [
        {"api": "completions"},
        {"api": "chat"},
    ]
    assert axes.experiment_axes(experiment=again)["declared_axis"] == ["load: api"]


def test_the_same_profile_with_the_same_load_is_refused(profile: ServerProfile) -> None:
    same = "Arms A and B run the same profile (eagle) with the same load"
    errors = _errors(profiles=[profile, profile], load=LOAD)
    assert same in errors["profiles"][0]
    errors = _errors(
        profiles=[profile, profile], load=LOAD, arm_loads=[{"temperature": 1}, {"temperature": 1}]
    )
    assert same in errors["profiles"][0]
    # B's own temperature is the shared load's: the two arms would run the same load.
    errors = _errors(
        profiles=[profile, profile], load={**LOAD, "temperature": 1.0},
        arm_loads=[{}, {"temperature": 1}],
    )  # fmt: skip
    assert same in errors["profiles"][0]


def test_an_arm_sets_only_the_acceptance_axes(
    profile: ServerProfile, make_profile: Callable[..., ServerProfile]
) -> None:
    other = make_profile(name="base")
    errors = _errors(profiles=[other, profile], load=LOAD, arm_loads=[{}, {"max_tokens": 5}])
    assert errors["load_b"] == [
        "Arm B: An arm sets only api, temperature for itself, not max_tokens (the rest of the "
        "load is the experiment's, shared by its arms)."
    ]
    errors = _errors(profiles=[other, profile], load=LOAD, arm_loads=[{}, {}, {}])
    assert errors["arm_loads"] == ["3 arm loads for 2 profiles: one per profile at most."]


def test_an_arms_load_is_checked_by_the_load_settings_model_merged_into_the_shared_one(
    profile: ServerProfile,
) -> None:
    errors = _errors(profiles=[profile, profile], load=LOAD, arm_loads=[{}, {"temperature": 3}])
    assert errors["load_b"] == ["Arm B: temperature: Must be between 0 and 2."]
    errors = _errors(profiles=[profile, profile], load=LOAD, arm_loads=[{"api": "raw"}, {}])
    assert errors["load_a"] == ["Arm A: api: Choose one of completions, chat, generate."]
    # Sessions carry their history as chat messages: an arm on the raw-prompt API is refused
    # by the model's own rule, as a sweep with that load would be.
    sessions = {**LOAD, "api": "chat", "session_turns": 3}
    errors = _errors(
        profiles=[profile, profile], load=sessions, arm_loads=[{}, {"api": "completions"}]
    )
    assert errors["load_b"] == [f"Arm B: session_turns: {LoadSettings.SESSIONS_MESSAGE}"]


def test_the_form_runs_one_profile_greedy_against_sampled(
    client: Client, operator: Any, profile: ServerProfile
) -> None:
    client.force_login(operator)
    data = {**FORM, "profile_a": profile.pk, "profile_b": profile.pk,
            "load_a": "temperature=0", "load_b": "temperature=1.0, api=chat"}  # fmt: skip
    response = client.post("/experiments/new/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    experiment = Experiment.objects.get()
    assert [a.load for a in experiment.arms.order_by("position")] == [
        {"temperature": 0.0},
        {"temperature": 1.0, "api": "chat"},
    ]
    page = client.get(response["Location"]).content.decode()
    assert '<span data-testid="arm-load"' in page
    assert "temperature=1.0 api=chat" in page
    refused = client.post("/experiments/new/", {**data, "load_b": "temperature"})
    assert refused.status_code == 400
    assert b"write key=value, e.g. temperature=0 or api=chat" in refused.content
    orphan = client.post("/experiments/new/", {**data, "load_c": "temperature=0.5"})
    assert orphan.status_code == 400
    assert b"Choose profile C for this arm&#x27;s load." in orphan.content
    assert Experiment.objects.count() == 1


def _series(label: str, load: dict[str, Any]) -> SeriesData:
    run = LevelRun(sweep_id=1, index=0, concurrency=1, figures={},
                   workload=workload_fingerprint(load))  # fmt: skip
    return SeriesData(label=label, name=label, speculative=True, profile_id=1, sweep_ids=(1,),
                      runs=(run,))  # fmt: skip


def test_the_declared_load_axis_leaves_the_workload_the_decision_compares() -> None:
    base = LoadSettings.clean({"requests_per_level": 5}).to_stored()
    a = _series("A", axes.arm_run_load(base, {"temperature": 0.0}))
    b = _series("B", axes.arm_run_load(base, {"temperature": 1.0}))
    assert a.runs[0].workload != b.runs[0].workload
    judged = axes.series_judged([a, b], ["load: temperature"])
    assert judged[0].runs[0].workload == judged[1].runs[0].workload
    assert "temperature=" not in judged[0].runs[0].workload
    assert "prompt_set=" in judged[0].runs[0].workload  # the rest of the workload still counts
    # A difference that is not declared still tells the arms apart.
    c = _series("C", axes.arm_run_load({**base, "max_tokens": 64}, {"temperature": 1.0}))
    judged = axes.series_judged([a, c], ["load: temperature"])
    assert judged[0].runs[0].workload != judged[1].runs[0].workload
    assert axes.series_judged([a, b], ["launch"]) == [a, b]


def test_the_declared_axis_names_the_launch_and_each_load_setting_that_differs() -> None:
    greedy, sampled = {"api": "chat", "temperature": 0.0}, {"api": "chat", "temperature": 1.0}
    assert axes.declared_axis([(1, greedy), (2, greedy)]) == ["launch"]
    assert axes.declared_axis([(1, greedy), (1, sampled)]) == ["load: temperature"]
    raw = {**sampled, "api": "completions"}
    assert axes.declared_axis([(1, greedy), (2, raw)]) == [
        "launch",
        "load: api",
        "load: temperature",
    ]


def test_the_command_line_sends_each_arms_load(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []

    def post(self: Any, path: str, body: Any = None) -> Any:
        sent.append(body)
        return {"experiment": {"id": 1, "state": "queued"}}

    monkeypatch.setattr(SpecdashClient, "post", post)
    monkeypatch.setattr(SpecdashClient, "profile_id", lambda self, p: int(p))
    call_command("specdash", "--token", "t", "experiment", "create", "3", "3", "--levels", "1",
                 "--arm-load", "temperature=0", "--arm-load", "temperature=1 api=chat",
                 stdout=io.StringIO())  # fmt: skip
    assert sent[0]["profiles"] == [3, 3]
    assert sent[0]["arm_loads"] == [{"temperature": 0.0}, {"temperature": 1.0, "api": "chat"}]
    with pytest.raises(CommandError, match="--arm-load: 'temperature': write key=value"):
        call_command("specdash", "--token", "t", "experiment", "create", "3", "3",
                     "--levels", "1", "--arm-load", "temperature")  # fmt: skip


def test_the_comparison_page_says_what_the_arms_are_declared_to_differ_in() -> None:
    comparison = {
        "declared_axis": ["load: temperature"],
        "arm_loads": {"A": {"api": "completions", "temperature": 0.0},
                      "B": {"api": "completions", "temperature": None}},
        "verdicts": [], "series": [], "rows": [], "warnings": [],
    }  # fmt: skip
    html = render_to_string("benchmarks/comparison_body.html", {"comparison": comparison})
    assert (
        "The arms are declared to differ in: load: temperature (A: completions API, temperature "
        "0.0; B: completions API, temperature server default)."
    ) in " ".join(html.split())
    plain = render_to_string("benchmarks/comparison_body.html", {"comparison": {"verdicts": []}})
    assert 'data-testid="declared-axis"' not in plain
