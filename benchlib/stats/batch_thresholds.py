"""Where a schedule switches, from the batch sizes the server ran at each tested level.

A per-step schedule (vLLM's ``num_speculative_tokens_per_batch_size``, SGLang's adaptive tiers)
switches on the *running batch*, not on the client's concurrency. Under a closed loop at C the
running batch drops below C between one request's end and the next admission (and, with equal
output lengths, several requests end on the same step), so a level at C=4 also runs batch sizes
1-3 for part of its steps. Thresholds placed on C alone ("K=1 up to 1, off from 2") then make
the C=2 and C=4 levels draft during their dips, a mix that neither fixed variant ran and that
can be behind both.

Input per tested level: the variants the schedule may run there (``admissible``, as indices
into the variants ordered simplest first): the level's own choice (the simplest variant no
other is conclusively ahead of, the matrix decision's statuses) and any other that nothing is
conclusively ahead of *and* whose point figure is no more than the margin below the own
choice's (so holding it costs nothing shown, nor anything the points suggest), and how
often the server's running-requests gauge read each batch size during the level
(``observed``, pooled over the variants' runs). A level's *range* is the batch sizes it ran
for at least ``min_share`` of its readings (a lone reading at the edge of a window is not a
batch the level runs); a level with no readings is taken to run exactly C.

The rule:

1. **Hold one variant across levels whose ranges overlap.** Walking up the levels, a chain
   of levels whose ranges overlap gets one variant, the simplest admissible at every level
   of the chain (so each of them runs a variant the matrix did not find behind there, and no
   switch falls inside a range). A level whose admissible set has nothing in common with the
   chain so far starts a new chain.
2. **Place each switch between the ranges.** Between two chains with different variants the
   switch goes to the first batch size above the lower chain's range when the upper variant is
   the simpler, else to the bottom of the upper chain's range (untested batch sizes go to the
   simpler variant: switch only where shown).
3. **Where ranges overlap across a switch** (rule 1 had to cut a chain), no per-batch schedule
   runs both levels on their own choice: the switch goes where the fewest readings of the two
   sides fall on the wrong side (ties: the simpler variant keeps the batch size), and the levels
   whose range straddles it are named (``straddling``): they run a mix of two variants, which
   is what the verification run then checks.

Without any readings every range is {C}: rule 1 never holds a variant across levels and
rule 2 is the concurrency rule (``decision_rule.group_bands``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Batch sizes read for less than this share of a level's gauge readings are left out of its
# range: the ramp and the drain at a window's edges (a reading a second) are not what it runs.
DEFAULT_MIN_SHARE = 0.05


@dataclass(frozen=True)
class LevelBatches:
    concurrency: int
    low: int  # the range of batch sizes the level ran (see the module notes)
    high: int
    readings: int  # gauge readings behind it (0: none, the range is {C})
    shares: Mapping[int, float]  # batch size -> share of the readings


@dataclass(frozen=True)
class Switch:
    """From batch size ``at`` on, the upper chain's variant applies."""

    at: int
    straddling: tuple[int, ...]  # levels whose range holds batch sizes on both sides


@dataclass(frozen=True)
class BatchPlan:
    """Per tested level the variant (index, 0 the simplest) the schedule runs there, and the
    switch points."""

    ranges: tuple[LevelBatches, ...]
    choices: Mapping[int, int]  # level -> variant index the schedule runs there
    # Level -> the other levels of its chain, for a level that runs a variant other than its
    # own simplest admissible one because its range overlaps theirs.
    held: Mapping[int, tuple[int, ...]]
    switches: tuple[Switch, ...]  # ascending, one per change of variant

    @property
    def observed(self) -> bool:
        return any(r.readings for r in self.ranges)

    def range_of(self, concurrency: int) -> LevelBatches:
        return next(r for r in self.ranges if r.concurrency == concurrency)


def level_batches(
    concurrency: int, counts: Mapping[int, int] | None, *, min_share: float = DEFAULT_MIN_SHARE
) -> LevelBatches:
    """A level's range from its gauge readings (batch size -> count); zero readings (an idle
    server between requests) are not a batch."""
    running = {b: n for b, n in (counts or {}).items() if b >= 1 and n > 0}
    total = sum(running.values())
    if total == 0:
        return LevelBatches(concurrency, concurrency, concurrency, 0, {})
    shares = {b: n / total for b, n in sorted(running.items())}
    kept = [b for b, share in shares.items() if share >= min_share]
    return LevelBatches(concurrency, min(kept), max(kept), total, shares)


def plan_batches(
    levels: Sequence[int],
    admissible: Mapping[int, Sequence[int]],
    observed: Mapping[int, Mapping[int, int]] | None = None,
    *,
    min_share: float = DEFAULT_MIN_SHARE,
) -> BatchPlan:
    """The plan for ``levels`` (any order) given each level's admissible variants (indices,
    0 the simplest) and its gauge readings (module notes)."""
    if not levels:
        raise ValueError("no level to plan")
    if not 0.0 <= min_share < 0.5:
        raise ValueError(f"min_share must be in [0, 0.5), not {min_share}")
    ordered = sorted(levels)
    for c in ordered:
        if not admissible.get(c):
            raise ValueError(f"C={c} has no admissible variant")
    observed = observed or {}
    ranges = [level_batches(c, observed.get(c), min_share=min_share) for c in ordered]
    # Rule 1: chains of overlapping ranges, each with one variant.
    chains: list[tuple[list[LevelBatches], set[int]]] = []
    for batches in ranges:
        allowed = set(admissible[batches.concurrency])
        if chains:
            members, common = chains[-1]
            overlaps = batches.low <= max(m.high for m in members)
            if overlaps and common & allowed:
                members.append(batches)
                common &= allowed
                continue
        chains.append(([batches], allowed))
    choices: dict[int, int] = {}
    held: dict[int, tuple[int, ...]] = {}
    chosen: list[int] = []
    for members, common in chains:
        k = min(common)
        chosen.append(k)
        for m in members:
            choices[m.concurrency] = k
            if min(admissible[m.concurrency]) != k:
                held[m.concurrency] = tuple(
                    o.concurrency for o in members if o.concurrency != m.concurrency
                )
    # Rules 2 and 3: one switch between chains whose variants differ.
    switches: list[Switch] = []
    start = 1
    lower: list[LevelBatches] = list(chains[0][0])  # the levels since the last switch
    for i in range(len(chains) - 1):
        upper = chains[i + 1][0]
        if chosen[i] == chosen[i + 1]:
            lower += upper
            continue
        at = _switch(lower, upper, lower_simpler=chosen[i] < chosen[i + 1], floor=start + 1)
        lower = list(upper)
        straddling = tuple(r.concurrency for r in ranges if r.readings and r.low < at <= r.high)
        switches.append(Switch(at, straddling))
        start = at
    return BatchPlan(tuple(ranges), choices, held, tuple(switches))


def _switch(
    lower: Sequence[LevelBatches],
    upper: Sequence[LevelBatches],
    *,
    lower_simpler: bool,
    floor: int,
) -> int:
    high = max(m.high for m in lower)
    low = min(m.low for m in upper)
    if high < low:
        # Rule 2: the gap between the ranges goes to the simpler variant.
        return max(floor, low if lower_simpler else high + 1)

    # Rule 3: the ranges overlap on [low, high]; a switch at s gives [.., s-1] to the lower
    # variant. Cost: the upper levels' readings below s and the lower levels' at or above s.
    def share(side: Sequence[LevelBatches], b: int) -> float:
        return max(m.shares.get(b, 0.0) for m in side)

    best: tuple[float, int, int] | None = None
    for at in range(max(floor, low), max(floor, high + 1) + 1):
        cost = sum(share(upper, b) for b in range(low, at)) + sum(
            share(lower, b) for b in range(at, high + 1)
        )
        # Ties: the simpler variant keeps the batch sizes (a later switch when it is below).
        tie = -at if lower_simpler else at
        key = (round(cost, 12), tie, at)
        if best is None or key < best:
            best = key
    assert best is not None
    return best[2]
