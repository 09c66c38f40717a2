"""The stored verdict entries read off the statistics' dataclasses: the same JSON text as the
key-by-key builders they replaced wrote (written out here), and entries that declare only what
the dataclasses have."""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pytest

from benchlib.stats.crossover import Crossing
from benchlib.stats.engines import EngineOption
from benchlib.stats.saturation import Saturation
from benchlib.stats.types import Ratio
from benchmarks.experiments import verdicts

RATIOS = [
    Ratio(point=1.25, low=1.1, high=1.4, method="repeats-log-t", confidence=0.95),
    Ratio(point=0.8, low=0.7, high=1.05, method="bootstrap-requests", confidence=0.9),
    Ratio(point=0.5, low=0.2, high=0.9, method="batch-means-log-t", confidence=0.95),
    Ratio(point=1.0, low=None, high=None, method="none", confidence=0.95, refused="no data"),
]
CROSSINGS = [
    Crossing(
        concurrency=12.5,
        lower_level=10,
        upper_level=20,
        direction="falls-behind",
        has_interval=True,
        low=8.0,
        high=None,
        conclusive=False,
    ),
    Crossing(
        concurrency=3.0,
        lower_level=2,
        upper_level=5,
        direction="pulls-ahead",
        has_interval=False,
        low=None,
        high=None,
        conclusive=True,
    ),
]
SATURATIONS = [
    Saturation(
        name="eagle",
        saturated=True,
        concurrency=64,
        throughput=5123.5,
        peak_concurrency=128,
        last_gain_per_doubling=0.01,
        tolerance=0.05,
        reason="gains under 5% per doubling from C=64",
    ),
    Saturation(
        name="baseline",
        saturated=False,
        concurrency=None,
        throughput=900.0,
        peak_concurrency=8,
        last_gain_per_doubling=None,
        tolerance=0.05,
        reason="still gaining",
    ),
]
OPTIONS = [
    EngineOption(engine="vllm", setting="--speculative-config", value='{"n": 3}', note="n"),
    EngineOption(
        engine="sglang", setting="--x", value="8", note="", source="server_args.py", version="0.5"
    ),
]


# The stored JSON text of each fixture above, written out by hand: the format the stored
# verdicts (and every page, export and API answer that reads them back) depend on. A literal
# is the oracle, not a builder: a copy of the code under test would pass whatever it wrote.
# A ratio's sign and inconclusive are read off its interval: above 1 (+1), containing 1 (0,
# inconclusive), below 1 (-1), none (0, not inconclusive: there is nothing to be unsure of).
RATIO_JSON = [
    '{"concurrency": 16, "point": 1.25, "low": 1.1, "high": 1.4, "method": "repeats-log-t", '
    '"sign": 1, "inconclusive": false, "refused": ""}',
    '{"concurrency": 16, "point": 0.8, "low": 0.7, "high": 1.05, "method": "bootstrap-requests", '
    '"sign": 0, "inconclusive": true, "refused": ""}',
    '{"concurrency": 16, "point": 0.5, "low": 0.2, "high": 0.9, "method": "batch-means-log-t", '
    '"sign": -1, "inconclusive": false, "refused": ""}',
    '{"concurrency": 16, "point": 1.0, "low": null, "high": null, "method": "none", '
    '"sign": 0, "inconclusive": false, "refused": "no data"}',
]
CROSSING_JSON = [
    '{"concurrency": 12.5, "lower_level": 10, "upper_level": 20, "direction": "falls-behind", '
    '"has_interval": true, "low": 8.0, "high": null, "conclusive": false}',
    '{"concurrency": 3.0, "lower_level": 2, "upper_level": 5, "direction": "pulls-ahead", '
    '"has_interval": false, "low": null, "high": null, "conclusive": true}',
]
# A saturation entry leaves out the arm's name and the tolerance: the verdict stores them once.
SATURATION_JSON = [
    '{"saturated": true, "concurrency": 64, "throughput": 5123.5, "peak_concurrency": 128, '
    '"last_gain_per_doubling": 0.01, "reason": "gains under 5% per doubling from C=64"}',
    '{"saturated": false, "concurrency": null, "throughput": 900.0, "peak_concurrency": 8, '
    '"last_gain_per_doubling": null, "reason": "still gaining"}',
]
ENGINE_OPTION_JSON = [
    '{"engine": "vllm", "setting": "--speculative-config", "value": "{\\"n\\": 3}", "note": "n", '
    '"source": "", "version": ""}',
    '{"engine": "sglang", "setting": "--x", "value": "8", "note": "", '
    '"source": "server_args.py", "version": "0.5"}',
]


def _entries() -> list[Any]:
    """Each fixture's entry builder, bound to it, with its stored JSON text."""
    cases: list[tuple[str, Sequence[object], Callable[..., object], list[str], list[str]]] = [
        (
            "ratio",
            RATIOS,
            partial(verdicts.ratio_entry, 16),
            RATIO_JSON,
            ["above-1", "containing-1", "below-1", "refused"],
        ),
        (
            "crossing",
            CROSSINGS,
            verdicts.crossing_entry,
            CROSSING_JSON,
            ["falls-behind", "pulls-ahead"],
        ),
        (
            "saturation",
            SATURATIONS,
            verdicts.saturation_dict,
            SATURATION_JSON,
            ["saturated", "still-gaining"],
        ),
        (
            "engine-option",
            OPTIONS,
            verdicts.engine_option_entry,
            ENGINE_OPTION_JSON,
            ["vllm", "sglang"],
        ),
    ]
    return [
        pytest.param(partial(build, value), stored, id=f"{kind}-{name}")
        for kind, values, build, texts, names in cases
        for value, stored, name in zip(values, texts, names, strict=True)
    ]


@pytest.mark.parametrize(("entry", "stored"), _entries())
def test_each_entry_stores_the_same_json_text_as_before(
    entry: Callable[[], object], stored: str
) -> None:
    assert json.dumps(entry()) == stored


def _field_hints(source: type) -> dict[str, object]:
    hints = typing.get_type_hints(source)
    return {f.name: hints[f.name] for f in dataclasses.fields(source)}


@pytest.mark.parametrize(
    ("entry", "source"),
    [(verdicts.CrossingEntry, Crossing), (verdicts.EngineOptionEntry, EngineOption)],
)
def test_whole_dataclass_entries_declare_its_fields_in_its_order(entry: type, source: type) -> None:
    # asdict writes the dataclass's fields in their order: the entry must declare exactly them.
    assert list(typing.get_type_hints(entry).items()) == list(_field_hints(source).items())


@pytest.mark.parametrize(
    ("entry", "source", "given"),
    [
        (verdicts.RatioEntry, Ratio, {"concurrency"}),
        (verdicts.SaturationEntry, Saturation, set()),
    ],
)
def test_chosen_entries_declare_only_what_the_dataclass_has(
    entry: type, source: type, given: set[str]
) -> None:
    fields = _field_hints(source)
    for key, hint in typing.get_type_hints(entry).items():
        if key in given:
            continue
        prop = getattr(source, key, None)
        if isinstance(prop, property):
            assert prop.fget is not None
            assert typing.get_type_hints(prop.fget)["return"] == hint, key
        else:
            assert fields.get(key) == hint, key
