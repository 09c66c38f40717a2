"""The stored verdict entries read off the statistics' dataclasses: the same JSON text as the
key-by-key builders they replaced, and entries that declare only what the dataclasses have."""

from __future__ import annotations

import dataclasses
import json
import typing

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


# The builders as they were written before the entries were read off the dataclasses: the
# stored JSON's reference.
def _old_ratio_entry(concurrency: int, ratio: Ratio) -> dict[str, object]:
    return {
        "concurrency": concurrency,
        "point": ratio.point,
        "low": ratio.low,
        "high": ratio.high,
        "method": ratio.method,
        "sign": ratio.sign,
        "inconclusive": ratio.inconclusive,
        "refused": ratio.refused,
    }


def _old_crossing_entry(c: Crossing) -> dict[str, object]:
    return {
        "concurrency": c.concurrency,
        "lower_level": c.lower_level,
        "upper_level": c.upper_level,
        "direction": c.direction,
        "has_interval": c.has_interval,
        "low": c.low,
        "high": c.high,
        "conclusive": c.conclusive,
    }


def _old_saturation_dict(s: Saturation) -> dict[str, object]:
    return {
        "saturated": s.saturated,
        "concurrency": s.concurrency,
        "throughput": s.throughput,
        "peak_concurrency": s.peak_concurrency,
        "last_gain_per_doubling": s.last_gain_per_doubling,
        "reason": s.reason,
    }


def _old_engine_option(o: EngineOption) -> dict[str, object]:
    return {
        "engine": o.engine,
        "setting": o.setting,
        "value": o.value,
        "note": o.note,
        "source": o.source,
        "version": o.version,
    }


@pytest.mark.parametrize("ratio", RATIOS)
def test_ratio_entry_stores_the_same_json_text_as_before(ratio: Ratio) -> None:
    assert json.dumps(verdicts.ratio_entry(16, ratio)) == json.dumps(_old_ratio_entry(16, ratio))


@pytest.mark.parametrize("crossing", CROSSINGS)
def test_crossing_entry_stores_the_same_json_text_as_before(crossing: Crossing) -> None:
    assert json.dumps(verdicts.crossing_entry(crossing)) == json.dumps(
        _old_crossing_entry(crossing)
    )


@pytest.mark.parametrize("saturation", SATURATIONS)
def test_saturation_entry_stores_the_same_json_text_as_before(saturation: Saturation) -> None:
    assert json.dumps(verdicts.saturation_dict(saturation)) == json.dumps(
        _old_saturation_dict(saturation)
    )


@pytest.mark.parametrize("option", OPTIONS)
def test_engine_option_entry_stores_the_same_json_text_as_before(option: EngineOption) -> None:
    assert json.dumps(verdicts.engine_option_entry(option)) == json.dumps(
        _old_engine_option(option)
    )


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
