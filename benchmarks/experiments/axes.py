"""Acceptance sensitivity as an experiment axis: an arm's own load settings.

An experiment's load is shared by its arms, which differ by server profile (their launch). Two
load settings change how much speculation gains without touching the server, so an arm may set
them for itself (``ExperimentArm.load``): the API (``chat`` applies the model's chat template,
``completions`` and ``generate`` send the raw prompt) and the sampling temperature (0: greedy;
sampling can silently disable or weaken speculation). Each arm's sweeps run the experiment's
load with its own merged in, checked by the load settings' own model as any sweep's load is.

The comparison names what the arms are declared to differ in (their launch, and ``load: api``
or ``load: temperature`` where their merged loads differ there), and the decision judges such
an experiment as any other: the declared load settings are left out of the workload it checks
the arms against each other on; any other difference still makes a level not comparable.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, TypedDict, cast

from django.core.exceptions import ValidationError

from benchlib.json_types import JsonObject
from benchmarks.experiments.level_runs import SeriesData
from benchmarks.experiments.models import Experiment
from benchmarks.sweeps.services import sweep_clean_plan

# The load settings an arm may set for itself (LoadSettings' own fields and rules).
ARM_LOAD_AXES = ("api", "temperature")
LAUNCH_AXIS = "launch"

# An arm's load as typed (``api=chat temperature=1``): numbers parsed, nothing checked yet.
ArmLoadText = dict[str, float | str]


class ArmLoad(TypedDict):
    """An arm's own load settings as stored (``ExperimentArm.load``), checked: the acceptance
    axes it sets (``ARM_LOAD_AXES``), each as the load settings' model cleaned it."""

    api: NotRequired[str]
    temperature: NotRequired[float]


class ExperimentAxes(TypedDict):
    """What the arms are declared to differ in, and each arm's acceptance-axis values (by
    label; empty unless the axis names a load setting), for the comparison to show."""

    declared_axis: list[str]
    arm_loads: dict[str, dict[str, object]]


def arm_load_field(label: str) -> str:
    """The field an arm's load errors are keyed by (the form's field of that arm)."""
    return f"load_{label.lower()}"


def parse_arm_load(text: str) -> ArmLoadText:
    """An arm's load typed as ``key=value`` items (``api=chat temperature=1``, spaces or commas
    between them); numbers stay numbers. The values are checked by ``arm_load_clean``."""
    out: ArmLoadText = {}
    for item in text.replace(",", " ").split():
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValidationError(f"{item!r}: write key=value, e.g. temperature=0 or api=chat")
        if key in out:
            raise ValidationError(f"{key} is given twice")
        try:
            out[key] = float(value) if key != "api" else value
        except ValueError:
            out[key] = value  # the model says what it expects
    return out


def arm_load_clean(
    *, levels: Sequence[Any], load: Mapping[str, Any], arm_load: Mapping[str, Any]
) -> tuple[ArmLoad, JsonObject]:
    """(the arm's own settings as stored, the load its sweeps run): only the acceptance axes,
    checked merged into the experiment's (cleaned) load by the sweep's own rules, so that a
    combination a sweep refuses (sessions on the completions API) is refused here. Blank
    values are no setting. Raises ValidationError with the messages."""
    given = {k: v for k, v in arm_load.items() if v is not None and v != ""}
    unknown = sorted(set(given) - set(ARM_LOAD_AXES))
    if unknown:
        raise ValidationError(
            f"An arm sets only {', '.join(ARM_LOAD_AXES)} for itself, not {', '.join(unknown)} "
            "(the rest of the load is the experiment's, shared by its arms)."
        )
    try:
        _, merged = sweep_clean_plan(levels, {**load, **given})
    except ValidationError as exc:
        messages = (
            [f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()]
            if hasattr(exc, "error_dict")
            else list(exc.messages)
        )
        raise ValidationError(messages) from None
    # Only ARM_LOAD_AXES' keys are left (the unknown were refused above), in the order given.
    return cast(ArmLoad, {k: merged[k] for k in given}), merged


def arm_run_load(load: Mapping[str, Any], arm_load: Mapping[str, Any]) -> JsonObject:
    """The load an arm's sweeps run: the experiment's with the arm's own settings over it."""
    return {**load, **arm_load}


def declared_axis(arms: Sequence[tuple[int, Mapping[str, Any]]]) -> list[str]:
    """What the arms, as (profile id, the load they run), are declared to differ in: their
    launch where their profiles differ, then ``load: <setting>`` for each acceptance axis
    whose value differs between them."""
    out = [LAUNCH_AXIS] if len({profile for profile, _ in arms}) > 1 else []
    for key in ARM_LOAD_AXES:
        values = {json.dumps(load.get(key), sort_keys=True) for _, load in arms}
        if len(values) > 1:
            out.append(f"load: {key}")
    return out


def load_axes(axis: Sequence[str]) -> list[str]:
    """The load settings named in a declared axis (``load: temperature`` -> temperature)."""
    return [a.removeprefix("load: ") for a in axis if a.startswith("load: ")]


def experiment_axes(*, experiment: Experiment) -> ExperimentAxes:
    """The experiment's declared axis and, when it includes a load setting, each arm's value of
    the acceptance axes (by label), for the comparison to show."""
    arms = list(experiment.arms.order_by("position"))
    base = dict(experiment.load or {})
    runs = [(arm.profile_id, arm_run_load(base, arm.load or {})) for arm in arms]
    axis = declared_axis(runs)
    arm_loads = {
        arm.label: {key: load.get(key) for key in ARM_LOAD_AXES}
        for arm, (_, load) in zip(arms, runs, strict=True)
    }
    return {"declared_axis": axis, "arm_loads": arm_loads if load_axes(axis) else {}}


def series_judged(series: Sequence[SeriesData], axis: Sequence[str]) -> list[SeriesData]:
    """``series`` with the declared load settings left out of each run's workload (the
    ``decisions.workload_fingerprint`` items), so that the decision compares the arms on the
    rest of their workload only."""
    keys = load_axes(axis)
    if not keys:
        return list(series)
    prefixes = tuple(f"{key}=" for key in keys)

    def judged(workload: str) -> str:
        return "; ".join(i for i in workload.split("; ") if not i.startswith(prefixes))

    return [
        dataclasses.replace(
            s, runs=tuple(dataclasses.replace(r, workload=judged(r.workload)) for r in s.runs)
        )
        for s in series
    ]
