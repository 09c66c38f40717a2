"""A schedule from a matrix experiment's stored levels, its tuned profile, the follow-up
experiment, and the verification report (constructed levels: no servers)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError

from benchlib.simulator.cli import parse_config
from benchlib.stats.decision import Arm, LevelEvidence
from benchlib.stats.decision_rule import decide
from benchlib.stats.decision_verification import (
    VerificationDecision,
    decide_verification,
    verification_from,
)
from benchlib.stats.types import Ratio
from benchmarks.experiments import services, tuning
from benchmarks.experiments.level_runs import series_curve
from benchmarks.experiments.matrix import matrix_variants
from benchmarks.experiments.models import Experiment, ExperimentState
from benchmarks.experiments.series import experiment_series
from hosts.models import Engine, ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep

SIM = [sys.executable, "-m", "benchlib.simulator", "--profile", "eagle3"]
LOAD = {"requests_per_level": 4, "max_tokens": 8}
# Two repeats per level, per arm (off, K=1, K=3): K=3 clearly ahead at C 1-2, off at C 8.
MATRIX = {
    1: ((100, 102), (150, 152), (200, 203)),
    2: ((180, 183), (250, 252), (330, 333)),
    8: ((600, 605), (500, 503), (400, 404)),
}


def complete_with(
    experiment: Experiment, values: Mapping[int, Sequence[Sequence[float]]], tmp: Path
) -> Experiment:
    """Completed sweeps for every step: arm i, repeat r measures values[C][i][r] at C."""
    for step in experiment.steps.select_related("arm__profile"):
        i = step.arm.position
        per_level = {c: float(v[i][step.repeat]) for c, v in values.items()}
        make_sweep(step.arm.profile, per_level, tmp=tmp, records=False, step=step)
    experiment.state = ExperimentState.COMPLETED
    experiment.save(update_fields=["state"])
    return experiment


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(settings, "SPECDASH_DATA_DIR", tmp_path / "data")
    return tmp_path / "data"


def _matrix(base: ServerProfile, axes: dict[str, list[int]], tmp: Path) -> Experiment:
    variants = matrix_variants(user=None, base=base, axes=axes, include_off=True)
    experiment = services.experiment_create(
        profiles=variants, levels=[1, 2, 8], load=LOAD, repeats=2
    )
    return complete_with(experiment, MATRIX, tmp)


def test_sglang_form_schedule_becomes_a_tuned_simulator_profile_and_a_follow_up(
    make_profile: Callable[..., ServerProfile], tmp_path: Path, data_dir: Path
) -> None:
    base = make_profile(name="Sim", launch_argv=SIM, speculative=True)
    first = _matrix(base, {"--speculative-num-steps": [1, 3]}, tmp_path)
    follow_up = tuning.verification_create(experiment=first)

    arms = list(follow_up.arms.order_by("position").select_related("profile"))
    tuned = arms[0].profile
    assert tuned.name == "Sim [schedule]"
    assert [a.profile.name for a in arms[1:]] == ["Sim [off]", "Sim [K=1]", "Sim [K=3]"]
    argv = tuned.launch_argv
    path = Path(argv[argv.index("--speculative-adaptive-config") + 1])
    assert path.parent == data_dir / "schedules"
    # K=3 up to C=2 (the levels it wins), off from 3 on.
    assert json.loads(path.read_text()) == {
        "1": {"candidate_steps": [3]},
        "3": {"candidate_steps": [0]},
    }
    # The simulator itself accepts the argv and drafts by batch size as derived.
    speculation = parse_config([*argv[3:], "--disable-cuda-graph"]).speculation
    assert speculation is not None
    assert (speculation.starts, speculation.lengths) == ((1, 3), (3, 0))
    assert (follow_up.levels, follow_up.load) == (first.levels, first.load)
    # Each level more than once by default: the verdict's intervals hold run-to-run spread.
    assert first.repeats == 2 and follow_up.repeats == tuning.VERIFY_REPEATS == 3
    assert tuning.VERIFY_TAG in follow_up.tags
    assert f"#{first.pk}" in follow_up.notes


def test_vllm_form_carries_ranges_in_the_speculative_config(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    config = {"method": "eagle3", "model": "d", "num_speculative_tokens": 3}
    base = make_profile(
        name="V", engine=Engine.VLLM, speculative=True,
        launch_argv=["vllm", "serve", "m", "--speculative-config", json.dumps(config)],
    )  # fmt: skip
    first = _matrix(base, {"--speculative-config.num_speculative_tokens": [1, 3]}, tmp_path)
    tuned = tuning.verification_create(experiment=first).arms.get(position=0).profile
    argv = tuned.launch_argv
    written = json.loads(argv[argv.index("--speculative-config") + 1])
    assert written == {
        **config,
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 3, 0]],
    }


def test_a_schedule_that_keeps_one_variant_is_not_verified(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    base = make_profile(name="Sim", launch_argv=SIM, speculative=True)
    variants = matrix_variants(
        user=None, base=base, axes={"--speculative-num-steps": [3]}, include_off=True
    )
    experiment = services.experiment_create(profiles=variants, levels=[1, 8], load=LOAD, repeats=2)
    complete_with(experiment, {1: ((100, 101), (200, 201)), 8: ((300, 301), (400, 401))}, tmp_path)
    with pytest.raises(ValidationError, match="K=3 at every level"):
        tuning.verification_create(experiment=experiment)


def test_an_unfinished_experiment_or_two_arms_with_one_draft_length_are_refused(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    a = make_profile(launch_argv=[*SIM, "--spec-steps", "3"])
    b = make_profile(launch_argv=[*SIM, "--speculative-num-steps", "3"])
    experiment = services.experiment_create(profiles=[a, b], levels=[1], load=LOAD, repeats=1)
    with pytest.raises(ValidationError, match="not completed"):
        tuning.verification_create(experiment=experiment)
    complete_with(experiment, {1: ((100,), (110,))}, tmp_path)
    with pytest.raises(ValidationError, match="both draft 3"):
        tuning.verification_create(experiment=experiment)


def test_verification_repeats_default_to_three_or_the_matrix_repeats_when_more(
    make_profile: Callable[..., ServerProfile],
) -> None:
    experiment = services.experiment_create(
        profiles=[make_profile(), make_profile()], levels=[1], load=LOAD, repeats=2
    )
    assert tuning.verification_repeats(experiment, None) == 3
    assert tuning.verification_repeats(experiment, 1) == 1
    experiment.repeats = 5
    assert tuning.verification_repeats(experiment, None) == 5
    for bad in (0, 11, True):
        with pytest.raises(ValidationError, match="from 1 to 10"):
            tuning.verification_repeats(experiment, bad)


def test_matrix_create_is_all_or_nothing(make_profile: Callable[..., ServerProfile]) -> None:
    base = make_profile(name="Sim", launch_argv=SIM, speculative=True)
    before = ServerProfile.objects.count()
    with pytest.raises(ValidationError) as caught:
        # Valid axes, a bad plan: the variants must not outlive the refused experiment.
        tuning.matrix_create(
            user=None, base=base, axes={"--speculative-num-steps": [1, 3]}, levels=[0], load=LOAD
        )
    assert "levels" in caught.value.message_dict
    assert ServerProfile.objects.count() == before and Experiment.objects.count() == 0
    experiment = tuning.matrix_create(
        user=None,
        base=base, axes={"--speculative-num-steps": [1, 3]}, include_off=True,
        levels=[1, 4], load=LOAD, repeats=2,
    )  # fmt: skip
    names = list(experiment.arms.order_by("position").values_list("profile__name", flat=True))
    assert names == ["Sim [off]", "Sim [K=1]", "Sim [K=3]"]
    assert (experiment.name, experiment.repeats) == ("Sim: --speculative-num-steps", 2)


def _verification(
    make_profile: Callable[..., ServerProfile], values: Mapping[int, Sequence[Sequence[float]]],
    tmp: Path,
) -> Experiment:  # fmt: skip
    names = ["Sim [schedule]", "Sim [off]", "Sim [K=1]"]
    profiles = [make_profile(name=n) for n in names]
    experiment = services.experiment_create(
        profiles=profiles, levels=sorted(values), load=LOAD, repeats=2, tags=[tuning.VERIFY_TAG]
    )
    return complete_with(experiment, values, tmp)


def test_report_says_the_schedule_is_as_good_as_every_fixed_choice(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    # tuned, off, K=1: tuned level with the best fixed (within noise) or ahead.
    values = {1: ((151, 149), (100, 102), (150, 152)), 8: ((602, 600), (600, 605), (500, 503))}
    report = tuning.verification_report(experiment=_verification(make_profile, values, tmp_path))
    assert report["ok"] is True
    assert report["verdict"].startswith(
        "The schedule is at least as good as every fixed choice at every level"
    )
    by_c = {row["concurrency"]: row for row in report["levels"]}
    assert by_c[1]["best_fixed"] == "Sim [K=1]" and by_c[8]["best_fixed"] == "Sim [off]"
    ratio = by_c[8]["ratio"]
    assert ratio["point"] == pytest.approx(601 / 602.5)
    assert ratio["low"] < 1 < ratio["high"]
    assert all(row["ok"] and not row["conclusively_worse_than"] for row in report["levels"])


def test_report_names_the_levels_where_a_fixed_choice_is_conclusively_ahead(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    values = {
        1: ((151, 149), (100, 102), (150, 152)),
        8: ((450, 452), (600, 605), (500, 503)),  # tuned wholly below off and K=1
    }
    report = tuning.verification_report(experiment=_verification(make_profile, values, tmp_path))
    assert report["ok"] is False
    by_c = {row["concurrency"]: row for row in report["levels"]}
    assert by_c[1]["ok"] and not by_c[8]["ok"]
    assert by_c[8]["conclusively_worse_than"] == ["Sim [off]", "Sim [K=1]"]
    assert by_c[8]["ratio"]["high"] < 1
    verdict = report["verdict"]
    assert verdict.startswith("The schedule is not at least as good as every fixed choice")
    behind, _, undecided = verdict.partition(" Not decided: ")
    assert "C=8 (Sim [off]: 0.749x" in behind and "C=1" not in behind
    assert undecided.startswith("C=1 (Sim [K=1]: the interval contains 1")


def test_report_refuses_an_experiment_that_is_not_a_verification(
    make_profile: Callable[..., ServerProfile],
) -> None:
    experiment = services.experiment_create(
        profiles=[make_profile(), make_profile()], levels=[1], load=LOAD, repeats=1
    )
    with pytest.raises(ValidationError, match="not a schedule verification"):
        tuning.verification_report(experiment=experiment)


def _ratio(point: float, low: float, high: float) -> Ratio:
    return Ratio(point=point, low=low, high=high, method="bootstrap-requests", confidence=0.95)


# The figures of a shared 2-core run: tuned / best fixed at C=1, 2 and 8.
_SHARED_RUN = {
    1: _ratio(1.003, 0.957, 1.053),
    2: _ratio(0.958, 0.947, 0.971),
    8: _ratio(0.983, 0.978, 0.986),
}


def _placed(ratios: Mapping[int, Ratio], margin: float) -> VerificationDecision:
    pair = decide(
        reference=Arm("k3"),
        candidate=Arm("tuned"),
        levels=[LevelEvidence(c, r) for c, r in ratios.items()],
        margin=margin,
    )
    return verification_from("tuned", [pair], margin=margin)


def _by_level(decision: VerificationDecision) -> dict[int, tuple[list[str], list[str]]]:
    return {
        lv.concurrency: (list(lv.ahead_of_tuned), list(lv.behind_within_margin))
        for lv in decision.levels
    }


def test_gaps_inside_the_margin_are_behind_within_it_not_conclusive() -> None:
    # C=2's interval (0.947-0.971) reaches below 1/1.05: it is not shown to be within 5%,
    # so tuned is behind there; C=8's (0.978-0.986) lies inside 1 +/- 5%.
    placed = _by_level(_placed(_SHARED_RUN, 0.05))
    assert placed == {1: ([], []), 2: (["k3"], []), 8: ([], ["k3"])}


def test_margin_zero_is_the_default_and_judges_every_conclusive_gap() -> None:
    assert tuning.DEFAULT_MARGIN == 0.0
    placed = _by_level(_placed(_SHARED_RUN, tuning.DEFAULT_MARGIN))
    assert placed == {1: ([], []), 2: (["k3"], []), 8: (["k3"], [])}


def test_a_ten_percent_gap_is_worse_even_with_the_margin() -> None:
    assert _by_level(_placed({1: _ratio(0.90, 0.88, 0.92)}, 0.05)) == {1: (["k3"], [])}


@pytest.mark.parametrize(
    ("margin", "ok", "within", "worse"),
    [(0.05, False, [8], [2]), (0.0, False, [], [2, 8])],
)
def test_verdict_on_the_shared_run_figures_depends_on_the_margin(
    margin: float, ok: bool, within: list[int], worse: list[int]
) -> None:
    decision = _placed(_SHARED_RUN, margin)
    assert decision.ok is ok
    assert [lv.concurrency for lv in decision.levels if lv.behind_within_margin] == within
    assert [lv.concurrency for lv in decision.levels if lv.ahead_of_tuned] == worse
    assert ("Behind within the margin" in decision.verdict) is bool(within)
    assert f"margin ±{margin:.0%}, 95% confidence" in decision.verdict
    # C=1's interval crosses 1: named as not decided, with the pair's reason.
    assert "Not decided: C=1 (k3: the interval contains 1" in decision.verdict
    assert "within-run" in decision.verdict  # request-bootstrap intervals say so


def test_the_report_renders_the_verification_decision_and_writes_no_sentence(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    values = {1: ((151, 149), (100, 102), (150, 152)), 8: ((450, 452), (600, 605), (500, 503))}
    experiment = _verification(make_profile, values, tmp_path)
    report = tuning.verification_report(experiment=experiment)
    curves = [series_curve(s) for s in experiment_series(experiment=experiment)]
    decision = decide_verification(curves[0], curves[1:])
    assert report["verdict"] == decision.verdict
    assert report["decision"] == decision.to_dict()
    assert report["ok"] is decision.ok is False
    assert [r["conclusively_worse_than"] for r in report["levels"]] == [
        list(lv.ahead_of_tuned) for lv in decision.levels
    ]
    # No pair of a verification carries a speculation recommendation.
    assert all(d.bands == () for d in decision.pairwise)
