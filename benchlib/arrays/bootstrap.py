"""The request bootstrap of ``benchlib.stats.intervals`` as array operations.

The replicates are the reference loop's, bit for bit: numpy's MT19937 is put in the state
``random.Random(seed)`` seeds, each ``random()`` is rebuilt from two 32-bit words the way
CPython does, an index is ``floor(random() * n)`` as ``random.choices`` takes it, and the
durations are added left to right (``cumsum``) as the built-in ``sum`` does, where numpy's
pairwise ``sum`` would move the last bits of the bounds. Memory is bounded by a block of
replicates, not by the number of requests times ``n_boot``.
"""

from __future__ import annotations

import math
import random

import numpy as np
import numpy.typing as npt

from benchlib.stats.intervals import SlotRate

# Draws per block of replicates: a block's arrays (the 32-bit words, the uniforms, the
# indices, the gathered columns) cost ~60 bytes a draw, so a block stays near 60 MB whatever
# the number of requests.
BLOCK_DRAWS = 1_000_000


def python_stream(seed: int) -> np.random.MT19937:
    """numpy's Mersenne Twister in the exact state of ``random.Random(seed)``."""
    key = random.Random(seed).getstate()[1]
    generator = np.random.MT19937()
    generator.state = {
        "bit_generator": "MT19937",
        "state": {"key": np.array(key[:624], dtype=np.uint32), "pos": key[624]},
    }
    return generator


def uniforms(generator: np.random.MT19937, count: int) -> npt.NDArray[np.float64]:
    """The next ``count`` values of ``random.Random.random()`` (53 bits from two words)."""
    words = generator.random_raw(2 * count)
    # CPython's (a * 2**26 + b) * 2**-53 in floats, done in integers (exact: below 2**53) and
    # converted once: the same doubles, one conversion pass instead of two.
    mantissa = (words[0::2] >> np.uint64(5)) << np.uint64(26)
    mantissa |= words[1::2] >> np.uint64(6)
    result: npt.NDArray[np.float64] = mantissa.astype(np.float64) * (1.0 / 9007199254740992.0)
    return result


class _Columns:
    def __init__(self, side: SlotRate) -> None:
        self.tokens = np.asarray(side.tokens, dtype=np.int64)
        self.durations = np.asarray(side.durations, dtype=np.float64)
        self.concurrency = side.concurrency

    def resampled(self, draws: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """The slot-rate throughput of each row of ``draws`` taken as one resample."""
        idx = np.floor(draws * float(len(self.tokens))).astype(np.intp)
        tokens = self.tokens[idx].sum(axis=1)
        durations = np.cumsum(self.durations[idx], axis=1)[:, -1]
        result: npt.NDArray[np.float64] = tokens.astype(np.float64) / durations * self.concurrency
        return result


def slot_rate_replicates(a: SlotRate, b: SlotRate, n_boot: int, seed: int) -> list[float]:
    """``intervals.slot_rate_replicates`` as array operations (the same list)."""
    cols_a, cols_b = _Columns(a), _Columns(b)
    n_a, n_b = len(cols_a.tokens), len(cols_b.tokens)
    per_replicate = n_a + n_b
    block = max(1, BLOCK_DRAWS // per_replicate)
    generator = python_stream(seed)
    replicates: list[float] = []
    while len(replicates) < n_boot:
        rows = min(block, n_boot - len(replicates))
        draws = uniforms(generator, rows * per_replicate).reshape(rows, per_replicate)
        num = cols_b.resampled(draws[:, :n_b])
        den = cols_a.resampled(draws[:, n_b:])
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(den > 0, num / den, math.inf)
        replicates.extend(ratio.tolist())
    return replicates
