from __future__ import annotations

import random

import pytest

from benchlib.arrays import bootstrap
from benchlib.stats import intervals
from benchlib.stats.types import RequestPoint


def _requests(rng: random.Random, n: int, slower: float) -> list[RequestPoint]:
    points = []
    for _ in range(n):
        start = rng.uniform(0.0, 100.0)
        duration = rng.uniform(0.5, 3.0) * slower
        points.append(
            RequestPoint(
                start=start,
                end=start + duration,
                output_tokens=rng.randint(1, 400),
                ttft=None,
                e2e=duration,
            )
        )
    return points


def test_the_stream_is_python_random_value_for_value() -> None:
    reference = random.Random(1_000_003 * 7 + 16)
    drawn = bootstrap.uniforms(bootstrap.python_stream(1_000_003 * 7 + 16), 5000).tolist()
    assert drawn == [reference.random() for _ in range(5000)]


@pytest.mark.parametrize(
    ("n_a", "n_b", "seed"), [(2, 2, 0), (3, 9, 1), (137, 120, 42), (2000, 1999, 7)]
)
def test_array_replicates_equal_the_reference_loop_bit_for_bit(
    n_a: int, n_b: int, seed: int
) -> None:
    rng = random.Random(seed)
    a = intervals.SlotRate(_requests(rng, n_a, 1.0))
    b = intervals.SlotRate(_requests(rng, n_b, 1.2))
    expected = intervals.slot_rate_replicates(a, b, 600, seed)
    assert bootstrap.slot_rate_replicates(a, b, 600, seed) == expected


def test_blocks_of_replicates_continue_one_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    # A block boundary in the middle of the replicates must not restart or skip draws.
    rng = random.Random(3)
    a = intervals.SlotRate(_requests(rng, 50, 1.0))
    b = intervals.SlotRate(_requests(rng, 70, 0.9))
    expected = intervals.slot_rate_replicates(a, b, 101, 11)
    monkeypatch.setattr(bootstrap, "BLOCK_DRAWS", 7 * 120 + 5)
    assert bootstrap.slot_rate_replicates(a, b, 101, 11) == expected


def test_the_interval_is_the_same_whichever_replicates_are_installed() -> None:
    rng = random.Random(9)
    a, b = _requests(rng, 300, 1.0), _requests(rng, 280, 1.1)
    previous = intervals.use_slot_rate_replicates(intervals.slot_rate_replicates)
    try:
        reference = intervals.ratio_from_requests(a, b, seed=5, n_boot=500)
        intervals.use_slot_rate_replicates(bootstrap.slot_rate_replicates)
        assert intervals.ratio_from_requests(a, b, seed=5, n_boot=500) == reference
    finally:
        intervals.use_slot_rate_replicates(previous)
