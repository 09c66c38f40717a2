"""The comparison built from sweeps in the database: which interval each level gets, the
crossover and saturation it reports, and what it leaves out."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks.experiments import comparison, equivalence, recording, selectors, services
from benchmarks.experiments.history import history_build
from benchmarks.experiments.series import sweep_series
from benchmarks.sweeps.models import LevelState
from hosts.models import ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep

pytestmark = pytest.mark.django_db

LOAD = {"requests_per_level": 10, "max_tokens": 16}


def _compare(*sweeps: Any) -> Any:
    return comparison.comparison_build(series=sweep_series(sweeps=list(sweeps)))


@pytest.fixture
def profiles(make_profile: Callable[..., ServerProfile]) -> tuple[ServerProfile, ServerProfile]:
    return make_profile(name="base"), make_profile(name="spec", speculative=True)


def test_a_candidate_ahead_everywhere_has_no_crossover_and_keeps_speculation_on(
    profiles: Any, tmp_path: Path
) -> None:
    base, spec = profiles
    # 160 requests (10 per slot at C=16): the within-run interval's time windows hold the
    # level's drain, which at a few requests per slot moves the level's figure by several %.
    a = make_sweep(base, {1: 90, 4: 300, 16: 600}, tmp=tmp_path, requests=160)
    b = make_sweep(spec, {1: 110, 4: 360, 16: 700}, tmp=tmp_path, seed=7, requests=160)
    (v,) = _compare(a, b)["verdicts"]
    assert v["crossover"]["last"] is None and v["crossover"]["crossings"] == []
    assert "ahead of base at every tested level" in v["crossover"]["reason"]
    assert v["ahead_from"] == 1 and v["behind_from"] is None
    assert v["disable_speculation_above"] is None and v["engine_options"] == []
    d = v["decision"]
    assert [lv["status"] for lv in d["levels"]] == ["ahead"] * 3
    assert d["recommendation"].startswith("Recommendation: keep speculation on (B (spec))")
    assert v["text"] == " ".join(d["statements"])


def test_behind_from_is_the_decisions_and_points_without_intervals_settle_nothing(
    profiles: Any, tmp_path: Path
) -> None:
    base, spec = profiles
    a = make_sweep(base, {1: 100, 4: 100, 16: 100}, tmp=tmp_path, records=False)
    b = make_sweep(spec, {1: 110, 4: 90, 16: 80}, tmp=tmp_path, records=False)
    (v,) = _compare(a, b)["verdicts"]
    assert [lv["status"] for lv in v["decision"]["levels"]] == ["inconclusive"] * 3
    assert (v["behind_from"], v["ahead_from"], v["settled_conclusively"]) == (None, None, False)
    a = make_sweep(base, {1: 100, 4: 100, 16: 100}, tmp=tmp_path, jitter=0.02, requests=160)
    b = make_sweep(spec, {1: 130, 4: 70, 16: 60}, tmp=tmp_path, jitter=0.02, seed=5, requests=160)
    (v,) = _compare(a, b)["verdicts"]
    assert [lv["status"] for lv in v["decision"]["levels"]] == ["ahead", "behind", "behind"]
    assert (v["behind_from"], v["ahead_from"], v["settled_conclusively"]) == (4, None, True)
    assert v["behind_from"] == v["decision"]["behind_from"]


def test_several_crossings_are_all_reported_and_the_last_one_decides(
    profiles: Any, tmp_path: Path
) -> None:
    base, spec = profiles
    a = make_sweep(base, {1: 100, 2: 100, 4: 100, 8: 100}, tmp=tmp_path, jitter=0.02)
    b = make_sweep(spec, {1: 120, 2: 80, 4: 120, 8: 80}, tmp=tmp_path, jitter=0.02, seed=3)
    (v,) = _compare(a, b)["verdicts"]
    brackets = [(c["lower_level"], c["upper_level"]) for c in v["crossover"]["crossings"]]
    assert brackets == [(1, 2), (2, 4), (4, 8)]
    assert v["crossover"]["last"]["direction"] == "falls-behind"
    assert 4 < v["crossover"]["last"]["concurrency"] < 8
    assert v["disable_speculation_above"] is None  # no single threshold: by band
    d = v["decision"]
    assert [lv["status"] for lv in d["levels"]] == ["ahead", "behind", "ahead", "behind"]
    # The decision crosses only between conclusive neighbours, each one named.
    assert [(c["lower_level"], c["upper_level"]) for c in d["crossovers"]] == brackets
    assert [b["action"] for b in d["bands"]] == ["on", "off", "on", "off"]


def test_single_sweeps_get_a_bootstrap_interval_from_their_records(
    profiles: Any, tmp_path: Path
) -> None:
    base, spec = profiles
    a = make_sweep(base, {1: 100, 8: 500}, tmp=tmp_path, jitter=0.3)
    b = make_sweep(spec, {1: 101, 8: 250}, tmp=tmp_path, jitter=0.3, seed=11)
    result = _compare(a, b)
    (v,) = result["verdicts"]
    by_c = {r["concurrency"]: r for r in v["ratios"]}
    assert {r["method"] for r in v["ratios"]} == {"batch-means-log-t"}
    assert by_c[8]["low"] < by_c[8]["point"] < by_c[8]["high"] < 1.0
    # 40 requests whose durations scatter +-30% cannot tell a 1% lead from a tie.
    assert by_c[1]["inconclusive"] and by_c[1]["low"] < 1.0 < by_c[1]["high"]
    assert result["series"][1]["interval_sources"] == {"1": "requests", "8": "requests"}


def test_without_records_a_level_has_a_point_ratio_and_no_interval(
    profiles: Any, tmp_path: Path
) -> None:
    base, spec = profiles
    a = make_sweep(base, {1: 100, 8: 500}, tmp=tmp_path, records=False)
    b = make_sweep(spec, {1: 110, 8: 250}, tmp=tmp_path, records=False)
    (v,) = _compare(a, b)["verdicts"]
    assert [(r["method"], r["low"], r["high"]) for r in v["ratios"]] == [("none", None, None)] * 2
    assert v["ratios"][0]["point"] == pytest.approx(1.1)
    assert v["crossover"]["last"]["has_interval"] is False
    d = v["decision"]
    assert [lv["status"] for lv in d["levels"]] == ["inconclusive"] * 2
    assert d["crossovers"] == [] and d["engine_options"] == []
    assert d["recommendation"].startswith("No recommendation yet")


def test_repeats_of_an_experiment_give_t_intervals_and_noisy_ones_stay_inconclusive(
    profiles: Any, tmp_path: Path
) -> None:
    base, spec = profiles
    experiment = services.experiment_create(
        profiles=[base, spec], levels=[1, 8], load=LOAD, repeats=3, order="interleaved"
    )
    steps = list(experiment.steps.select_related("arm").order_by("index"))
    assert [(s.arm.label, s.repeat) for s in steps] == [
        ("A", 0), ("B", 0), ("B", 1), ("A", 1), ("A", 2), ("B", 2),
    ]  # fmt: skip
    # C=1: B's repeats scatter +-15% around A's: inconclusive. C=8: B clearly at half.
    values = {
        "A": [{1: 100, 8: 500}, {1: 101, 8: 505}, {1: 99, 8: 495}],
        "B": [{1: 120, 8: 250}, {1: 88, 8: 252}, {1: 104, 8: 248}],
    }
    for step in steps:
        profile = base if step.arm.label == "A" else spec
        make_sweep(profile, values[step.arm.label][step.repeat], tmp=tmp_path, step=step)
    result: Any = recording.experiment_store_comparison(experiment_id=experiment.pk)
    (v,) = result["verdicts"]
    by_c = {r["concurrency"]: r for r in v["ratios"]}
    assert {r["method"] for r in v["ratios"]} == {"repeats-pooled-log-t"}
    assert by_c[1]["inconclusive"] and by_c[1]["point"] == pytest.approx(104 / 100)
    # The run-to-run variance is pooled over the levels (C=1's scatter widens C=8's interval).
    assert by_c[8]["low"] < 0.5 < by_c[8]["high"] < 0.6
    assert result["series"][0]["levels"][0]["runs"] == 3
    d = v["decision"]
    # B's first and last runs at C=1 differ by 13% (120 -> 104): over the experiment's levels
    # that is a 7.3% drift of B, which a 3-run experiment cannot tell from the machine's, so
    # C=8's clear interval settles nothing either.
    assert [(lv["status"], lv["repeats"]) for lv in d["levels"]] == [
        ("inconclusive", 3),
        ("inconclusive", 3),
    ]
    assert "drift of 7.3%" in d["levels"][1]["reason"]
    assert not d["within_run"] and result["reference"] == "A"
    experiment.refresh_from_db()
    assert experiment.comparison["verdicts"][0]["text"] == v["text"]


def test_partial_levels_are_left_out_and_unmatched_levels_are_named(
    profiles: Any, tmp_path: Path
) -> None:
    base, spec = profiles
    a = make_sweep(base, {1: 100, 4: 300, 16: 500}, tmp=tmp_path)
    b = make_sweep(spec, {1: 110, 4: 200, 16: 90}, tmp=tmp_path,
                   states={16: LevelState.PARTIAL})  # fmt: skip
    result = _compare(a, b)
    (v,) = result["verdicts"]
    assert [r["concurrency"] for r in v["ratios"]] == [1, 4]
    assert v["unmatched"] == [16]
    assert any("tested by only one side: 16" in w for w in result["warnings"])


def test_a_profile_without_completed_levels_is_reported_not_compared(
    profiles: Any, tmp_path: Path
) -> None:
    base, spec = profiles
    a = make_sweep(base, {1: 100, 4: 300}, tmp=tmp_path)
    b = make_sweep(spec, {1: 110}, tmp=tmp_path, states={1: LevelState.FAILED})
    result = _compare(a, b)
    assert result["verdicts"] == []
    assert result["series"][1]["levels"] == [] and result["series"][1]["saturation"] is None
    assert any("B (spec) has no completed level" in w for w in result["warnings"])


def test_the_same_profile_twice_is_told_apart_by_sweep(profiles: Any, tmp_path: Path) -> None:
    base, _ = profiles
    a = make_sweep(base, {1: 100, 4: 300}, tmp=tmp_path)
    b = make_sweep(base, {1: 100, 4: 330}, tmp=tmp_path, seed=5)
    result = _compare(a, b)
    names = [s["name"] for s in result["series"]]
    assert names == [f"base (sweep #{a.pk})", f"base (sweep #{b.pk})"]
    assert result["verdicts"][0]["text"].startswith(f"B (base (sweep #{b.pk})) against ")


def test_history_reports_each_sweeps_single_stream_and_saturation(
    profiles: Any, tmp_path: Path
) -> None:
    base, _ = profiles
    make_sweep(base, {1: 90, 8: 500, 64: 760, 256: 770}, tmp=tmp_path, records=False)
    make_sweep(base, {2: 170, 8: 520}, tmp=tmp_path, records=False)
    history = history_build(runs=selectors.profile_history_runs(profile_id=base.pk))
    assert [(h["c1_tok_s"], h["lowest_concurrency"]) for h in history] == [(90, 1), (None, 2)]
    assert history[0]["saturation"]["saturated"] and history[0]["saturation"]["concurrency"] == 64
    assert not history[1]["saturation"]["saturated"]


def test_a_profile_whose_greedy_output_changes_between_its_own_runs_is_flagged() -> None:
    check: Any = {"prompts": ["p1", "p2"], "max_tokens": 8,
             "outputs": [{"text": " the and"}, {"text": " for you"}]}  # fmt: skip
    drifted: Any = {**check, "outputs": [{"text": " the and"}, {"text": " for"}]}
    summary = equivalence.equivalence_summary(
        reference="A", runs={"A": [check], "B": [check, drifted]}
    )
    b = next(p for p in summary["profiles"] if p["label"] == "B")
    assert summary["flagged"] == ["B"] and not b["deterministic"] and not b["equivalent"]
    assert b["differences"][0]["prompt"] == "p2" and b["differences"][0]["common_prefix_chars"] == 4


def test_every_ratio_point_is_the_ratio_of_its_rows_figures(profiles: Any, tmp_path: Path) -> None:
    base, spec = profiles
    a = make_sweep(base, {1: 100, 8: 500}, tmp=tmp_path, jitter=0.3)
    b = make_sweep(spec, {1: 101, 8: 250}, tmp=tmp_path, jitter=0.3, seed=11)
    result = _compare(a, b)
    for row in result["rows"]:
        cells = {c["label"]: c for c in row["cells"]}
        (ratio,) = row["ratios"]
        assert ratio["point"] == cells["B"]["output_tok_s"] / cells["A"]["output_tok_s"]


def test_an_interval_from_records_of_another_level_is_refused_and_warned_about(
    profiles: Any, tmp_path: Path
) -> None:
    """The reported case: a resume relabelled B's C=8 requests as level 0 (C=1)."""
    base, spec = profiles
    a = make_sweep(base, {1: 100, 8: 500}, tmp=tmp_path)
    b = make_sweep(spec, {1: 105, 8: 400}, tmp=tmp_path, seed=11)
    path = Path(b.records_path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, "level": 0}) + "\n" for r in lines if r["level"] == 1))
    result = _compare(a, b)
    (v,) = result["verdicts"]
    c1 = next(r for r in v["ratios"] if r["concurrency"] == 1)
    assert (c1["method"], c1["low"], c1["high"]) == ("none", None, None)
    assert c1["point"] == pytest.approx(1.05, rel=0.05)
    assert "not the data the figures were computed from" in c1["refused"]
    assert any("C=1: interval not shown" in w for w in result["warnings"])


def test_a_vllm_candidates_recommendation_is_its_own_config_with_the_switch(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    import json

    spec = {"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 3}
    base = make_profile(name="base", engine="vllm", launch_argv=["python3", "-m", "vllm"])
    cand = make_profile(
        name="spec", engine="vllm", speculative=True,
        launch_argv=["python3", "-m", "vllm", "--speculative-config", json.dumps(spec)],
    )  # fmt: skip
    a = make_sweep(base, {1: 100, 2: 100, 4: 100, 8: 100}, tmp=tmp_path, jitter=0.02)
    b = make_sweep(cand, {1: 130, 2: 120, 4: 70, 8: 60}, tmp=tmp_path, jitter=0.02, seed=3)
    (v,) = _compare(a, b)["verdicts"]
    assert v["disable_speculation_above"] == 2
    config = json.loads(v["vllm_speculative_config"])
    # What tests/engines/vllm/test_vllm.py starts the real vLLM with: the same shape, accepted.
    assert config == {**spec, "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 3, 0]]}


def test_a_level_whose_arm_drifted_beyond_the_margin_is_inconclusive_whatever_its_interval(
    profiles: Any, tmp_path: Path
) -> None:
    base, spec = profiles
    experiment = services.experiment_create(
        profiles=[base, spec], levels=[1, 8], load=LOAD, repeats=3, order="interleaved"
    )
    # C=1: B 50% ahead, each arm's runs within 0.3% of each other. C=8: B at half of A, but A
    # rose 12% from its first run to its last (500 -> 560): the machine changed under the
    # experiment (A's drift over the levels is about 6%), so no interval settles anything.
    values: dict[str, list[dict[int, float]]] = {
        "A": [{1: 100, 8: 500}, {1: 100.5, 8: 530}, {1: 100.2, 8: 560}],
        "B": [{1: 150, 8: 250}, {1: 151, 8: 251}, {1: 150.5, 8: 250.5}],
    }
    for step in experiment.steps.select_related("arm").order_by("index"):
        profile = base if step.arm.label == "A" else spec
        make_sweep(profile, values[step.arm.label][step.repeat], tmp=tmp_path, step=step)
    result: Any = recording.experiment_store_comparison(experiment_id=experiment.pk)
    drift = {d["concurrency"]: d["drift"] for d in result["protocol"]["drift"]["B"]}
    assert drift[8] == pytest.approx(560 / 500 - 1) and drift[1] < 0.02
    (v,) = result["verdicts"]
    by_c = {r["concurrency"]: r for r in v["ratios"]}
    assert by_c[8]["high"] < 0.6  # the interval alone would say "behind"
    levels = {lv["concurrency"]: lv for lv in v["decision"]["levels"]}
    for c in (1, 8):
        assert levels[c]["status"] == "inconclusive" and "drift" in levels[c]["reason"]
