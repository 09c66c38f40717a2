"""Tune, then verify: a speculation schedule from a completed matrix experiment, run against
every fixed choice it was derived from.

``verification_create``: the arms of a completed experiment are variants of one server that
differ in draft length (read from each arm's argv, ``draft_length``). The schedule is derived
from their stored levels (``benchlib.stats.schedule``), written as the engine's own
configuration (``schedule_configs``) into a new "tuned" variant profile, and a follow-up
experiment runs [tuned, every fixed variant] on the same levels and load, each level
``VERIFY_REPEATS`` times by default (or the first experiment's repeats when more), so that
each tuned / fixed interval holds the spread between runs, not only the spread of one run's
requests. The schedule was chosen on the data it is judged by in the first experiment; the
follow-up measures it afresh.

``verification_report``: on that follow-up, per level, tuned / best fixed variant with its
interval, and the verdict of the verification's decision (``benchlib.stats.
decision_verification``, margin 0 by default): at least as good as every fixed choice at every
level, or the levels where some fixed choice is conclusively ahead. No sentence is written here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from benchlib.json_types import JsonObject
from benchlib.stats.decision import DEFAULT_MARGIN as DECISION_MARGIN
from benchlib.stats.decision import ArmHealth
from benchlib.stats.decision_verification import VERIFY_MARGIN, Predicted, decide_verification
from benchlib.stats.intervals import DEFAULT_CONFIDENCE
from benchlib.stats.schedule import Schedule, Variant, derive_schedule
from benchlib.stats.schedule_configs import (
    SGLANG_CONFIG_FILE,
    llamacpp_schedule_entry,
    sglang_adaptive_config,
    vllm_speculative_config_for,
)
from benchlib.stats.types import Curve, Ratio, RatioMethod
from benchmarks.experiments import drafts, selectors, services
from benchmarks.experiments.decisions import arm_health, is_rate_mode
from benchmarks.experiments.level_runs import SeriesData, series_curve
from benchmarks.experiments.matrix import (
    drop_flags,
    flag_value,
    matrix_variants,
    set_flag,
    variant_profile,
)
from benchmarks.experiments.models import DEFAULT_ORDER, Experiment, ExperimentState
from benchmarks.experiments.schedule import RATE_MODE_MESSAGE, experiment_schedule
from benchmarks.experiments.series import experiment_series, running_batches
from hosts.models import HostKind, ServerProfile

VERIFY_TAG = "schedule-verification"
# Sweeps per arm in a verification: with one, a level's interval comes from one run's requests
# (batch means), blind to the few percent arms drift between runs on a shared machine.
VERIFY_REPEATS = 3
_SGLANG_ADAPTIVE = ("--speculative-adaptive", "--speculative-adaptive-config")


def _invalid(message: str) -> ValidationError:
    return ValidationError({"__all__": [message]})


def draft_length(profile: ServerProfile) -> int:
    """The draft tokens per step ``profile`` serves with at every load (0: no speculation),
    read from its argv as its engine reads it (``drafts.draft_length``); ValidationError when
    the argv does not state one, or the profile already adapts to load."""
    k = drafts.draft_length(profile.engine, profile.launch_argv)
    if k is None:
        where = drafts.DRAFT_FLAGS.get(profile.engine, f"no flag known for {profile.engine!r}")
        raise _invalid(
            f"{profile.name}: its argv does not state one draft length for every load ({where})"
        )
    return k


@dataclass(frozen=True)
class Derived:
    schedule: Schedule
    fixed: list[ServerProfile]  # the experiment's arms, in arm order
    by_k: dict[int, ServerProfile]


def derive(experiment: Experiment) -> Derived:
    """The schedule of a completed experiment whose arms differ in draft length only."""
    if experiment.state != ExperimentState.COMPLETED:
        raise _invalid(f"Experiment #{experiment.pk} is {experiment.state}, not completed.")
    arms = selectors.experiment_arms(experiment_id=experiment.pk)
    profiles = [arm.profile for arm in arms]
    if len({p.engine for p in profiles}) != 1 or len({p.host_id for p in profiles}) != 1:
        raise _invalid("The arms are not variants of one server (engine or host differ).")
    by_k: dict[int, ServerProfile] = {}
    for profile in profiles:
        k = draft_length(profile)
        if k in by_k:
            raise _invalid(f"{by_k[k].name} and {profile.name} both draft {k}: one per length.")
        by_k[k] = profile
    series = experiment_series(experiment=experiment)
    if any(is_rate_mode(s.runs) for s in series):
        raise _invalid(RATE_MODE_MESSAGE)
    curves = {s.profile_id: series_curve(s) for s in series}
    variants = [Variant(curves[by_k[k].pk], k) for k in sorted(by_k)]  # simplest first
    # The switches go where the server's running batch sizes say, as on the comparison page.
    observed = running_batches(series=series)
    try:
        schedule = derive_schedule(variants, margin=DECISION_MARGIN, observed=observed)
    except ValueError as exc:
        raise _invalid(f"No schedule: {exc}") from None
    return Derived(schedule, profiles, by_k)


def _base_name(name: str) -> str:
    return re.sub(r"\s*\[[^\]]*\]$", "", name) or name


def _vllm_form(profiles: Sequence[ServerProfile]) -> bool:
    engine = profiles[0].engine
    if engine == "vllm":
        return True
    return engine == "simulator" and any(
        flag_value(p.launch_argv, "--speculative-config") is not None
        or flag_value(p.launch_argv, "--metrics-style") == "vllm"
        for p in profiles
    )


def _config_file(template: ServerProfile, text: str) -> str:
    """SGLang reads its adaptive config from a file: written here for a local host, where the
    server runs on this machine; elsewhere the file would have to be placed by hand."""
    if template.host is None or template.host.kind != HostKind.LOCAL:
        raise _invalid(
            f"SGLang's --speculative-adaptive-config is a file on the server's host; "
            f"{template.host} is not local. Place this {SGLANG_CONFIG_FILE} there and add a "
            f"profile by hand:\n{text}"
        )
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path(settings.SPECDASH_DATA_DIR) / "schedules" / f"adaptive-{digest}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def tuned_argv(derived: Derived) -> list[str]:
    """The argv of the most-drafting variant with the schedule in its engine's flags."""
    steps = derived.schedule.steps()
    if len(steps) == 1:
        raise _invalid(
            f"The schedule keeps K={steps[0].draft_length} at every level: it is one of the "
            "fixed variants, so there is nothing to verify."
        )
    top = max(s.draft_length for s in steps)
    template = derived.by_k[top]
    argv = list(template.launch_argv)
    engine = template.engine
    if _vllm_form(derived.fixed):
        raw = flag_value(argv, "--speculative-config")
        base = json.loads(raw) if raw else {}
        seqs = flag_value(argv, "--max-num-seqs")
        config = vllm_speculative_config_for(
            steps, base, max_num_seqs=int(seqs) if seqs and seqs.isdigit() else None
        )
        assert config is not None  # more than one step: some step drafts
        if engine == "simulator":
            argv = drop_flags(argv, ("--speculative-num-steps", "--speculative-eagle-topk"))
            argv = set_flag(argv, "--metrics-style", "vllm")
        return set_flag(argv, "--speculative-config", json.dumps(config, separators=(",", ":")))
    if engine in ("sglang", "simulator"):
        text = json.dumps(sglang_adaptive_config(steps), indent=2) + "\n"
        argv = drop_flags(argv, _SGLANG_ADAPTIVE)
        argv = set_flag(argv, "--speculative-num-steps", str(top))
        argv = set_flag(argv, "--speculative-eagle-topk", "1")
        return [
            *argv,
            "--speculative-adaptive",
            "--speculative-adaptive-config",
            _config_file(template, text),
        ]
    if engine == "llamacpp":
        raise _invalid(llamacpp_schedule_entry(steps).note)
    raise _invalid(f"No schedule configuration is known for a {engine} profile.")


def matrix_create(
    *,
    base: ServerProfile,
    axes: Mapping[str, Any],
    include_off: bool = False,
    levels: Sequence[int],
    load: Mapping[str, object],
    name: str = "",
    user: Any,
    **options: Any,
) -> Experiment:
    """The variants of ``base`` over ``axes`` (``matrix.matrix_variants``) queued as one
    experiment's arms, all or nothing: a bad axis or plan creates no profile. ``options``:
    the rest of ``services.experiment_create``'s (repeats, order, notes, tags, ...)."""
    with transaction.atomic():
        variants = matrix_variants(base=base, axes=axes, include_off=include_off, user=user)
        return services.experiment_create(
            profiles=variants,
            levels=list(levels),
            load=load,
            name=name or f"{base.name}: {', '.join(axes)}",
            user=user,
            **options,
        )


def verification_repeats(experiment: Experiment, repeats: int | None) -> int:
    """The repeats of ``experiment``'s verification: ``repeats`` when given (1 to
    ``services.MAX_REPEATS``), else ``VERIFY_REPEATS`` or the experiment's own when more."""
    if repeats is None:
        return max(VERIFY_REPEATS, experiment.repeats)
    if isinstance(repeats, bool) or not 1 <= repeats <= services.MAX_REPEATS:
        raise ValidationError(
            {"repeats": [f"Repeats must be a whole number from 1 to {services.MAX_REPEATS}."]}
        )
    return repeats


def verification_create(
    *, experiment: Experiment, repeats: int | None = None, user: Any = None
) -> Experiment:
    """Queue [tuned, every fixed variant] on ``experiment``'s levels and load, each
    ``verification_repeats`` times (default: ``VERIFY_REPEATS``)."""
    count = verification_repeats(experiment, repeats)
    with transaction.atomic():  # the tuned profile only with its experiment
        return _verification_create(experiment, count, user)


def _verification_create(experiment: Experiment, count: int, user: Any) -> Experiment:
    derived = derive(experiment)
    argv = tuned_argv(derived)
    template = derived.by_k[max(s.draft_length for s in derived.schedule.steps())]
    described = derived.schedule.describe()
    tuned = variant_profile(
        template,
        "schedule",
        argv,
        speculative=True,
        notes=f"Schedule from experiment #{experiment.pk}: {described}",
    )
    if tuned.name.startswith(f"{template.name} ["):
        # "Base [K=5] [schedule]" reads worse than "Base [schedule]".
        wanted = f"{_base_name(template.name)} [schedule]"
        if not ServerProfile.objects.filter(name=wanted).exclude(pk=tuned.pk).exists():
            tuned.name = wanted
            tuned.save(update_fields=["name"])
    verification = services.experiment_create(
        profiles=[tuned, *derived.fixed],
        levels=experiment.levels,
        load=dict(experiment.load),
        name=f"Verify the schedule of #{experiment.pk}",
        repeats=count,
        order=DEFAULT_ORDER,  # A B C C B A: every arm's mean at the same time
        notes=f"Verifies the schedule derived from experiment #{experiment.pk}: {described}",
        tags=[VERIFY_TAG],
        user=user,
    )
    # What the schedule's decision predicts each switch costs the level above it, kept from
    # before the run so that the report sets the measured ratio beside it.
    decision = experiment_schedule(experiment=experiment).get("decision") or {}
    verification.schedule_prediction = list(decision.get("switch_costs") or [])
    verification.save(update_fields=["schedule_prediction"])
    return verification


class RatioFigures(TypedDict):
    point: float
    low: float | None
    high: float | None
    method: RatioMethod


class VerifiedLevel(TypedDict):
    """One level's row of a verification (``level_verdicts``): tuned / best fixed."""

    concurrency: int
    tuned: float
    best_fixed: str
    best_fixed_value: float
    ratio: RatioFigures
    conclusively_worse_than: list[str]
    behind_within_margin: list[str]
    undecided: list[str]
    ok: bool
    predicted: JsonObject | None  # decision_verification.Predicted as a dict


class LevelVerdicts(TypedDict):
    levels: list[VerifiedLevel]
    ok: bool
    verdict: str
    decision: JsonObject  # VerificationDecision.to_dict()


def _ratio_dict(ratio: Ratio) -> RatioFigures:
    return {"point": ratio.point, "low": ratio.low, "high": ratio.high, "method": ratio.method}


# The verification's margin: 0 by default, since its levels run several times and their
# intervals hold the run-to-run spread (``decision_verification``).
DEFAULT_MARGIN = VERIFY_MARGIN


def level_verdicts(
    tuned: Curve,
    fixed: Sequence[Curve],
    margin: float = DEFAULT_MARGIN,
    health: dict[str, dict[int, ArmHealth]] | None = None,
    predicted: Sequence[Predicted] = (),
) -> LevelVerdicts:
    """The verification's decision (``decide_verification``) rendered as rows: per level
    tuned / best fixed with its interval, the fixed variants ahead of tuned there and those it
    is behind within the margin, the schedule decision's predicted ratio where it made one;
    the verdict is the decision's own sentence."""
    decision = decide_verification(tuned, fixed, margin=margin, health=health, predicted=predicted)
    curves = {c.name: c for c in fixed}
    rows: list[VerifiedLevel] = []
    for level in decision.levels:
        c = level.concurrency
        tuned_level, best_level = tuned.level(c), curves[level.best_fixed].level(c)
        assert tuned_level is not None and best_level is not None
        rows.append(
            {
                "concurrency": c,
                "tuned": tuned_level.value,
                "best_fixed": level.best_fixed,
                "best_fixed_value": best_level.value,
                "ratio": _ratio_dict(level.ratio),
                "conclusively_worse_than": list(level.ahead_of_tuned),
                "behind_within_margin": list(level.behind_within_margin),
                "undecided": list(level.undecided),
                "ok": level.ok,
                "predicted": (
                    dataclasses.asdict(level.predicted) if level.predicted is not None else None
                ),
            }
        )
    return {
        "levels": rows,
        "ok": decision.ok,
        "verdict": decision.verdict,
        "decision": decision.to_dict(),
    }


def _health(series: SeriesData) -> dict[int, ArmHealth]:
    """Each level's health from its runs' stored summaries (``decisions.arm_health``)."""
    levels = sorted({run.concurrency for run in series.runs})
    return {c: arm_health([r for r in series.runs if r.concurrency == c]) for c in levels}


def verification_report(
    *, experiment: Experiment, margin: float = DEFAULT_MARGIN
) -> dict[str, Any]:
    """The per-level report of a verification experiment (arm A is the tuned schedule)."""
    if VERIFY_TAG not in (experiment.tags or []):
        raise _invalid(f"Experiment #{experiment.pk} is not a schedule verification.")
    series = experiment_series(experiment=experiment)
    curves = [series_curve(s) for s in series]
    if len(curves) < 2:
        raise _invalid(f"Experiment #{experiment.pk} has fewer than two arms.")
    health = {curve.name: _health(s) for curve, s in zip(curves, series, strict=True)}
    predicted = [
        p
        for cost in experiment.schedule_prediction or []
        if (p := Predicted.from_switch_cost(cost)) is not None
    ]
    report = level_verdicts(curves[0], curves[1:], margin, health, predicted)
    return {
        "experiment_id": experiment.pk,
        "state": experiment.state,
        "tuned": curves[0].name,
        "fixed": [c.name for c in curves[1:]],
        "confidence": DEFAULT_CONFIDENCE,
        "margin": margin,
        **report,
    }
