"""The typed rows a sweep's page reads: the sweep, a level's figures, progress, a live sample.

``benchmarks.sweeps.selectors`` builds them; the sweep snapshot, the sweep events
(``benchmarks.sweeps.channel``) and the exports carry them as they are, so a snapshot and the
live events that follow it have the same shape. They travel as JSON, so these are
``TypedDict``s: plain dicts at run time, one declared shape for mypy and the reader.
"""

from __future__ import annotations

from typing import TypedDict

from benchlib.json_types import JsonObject


class SweepRow(TypedDict):
    """``selectors.sweep_as_dict``."""

    id: int
    state: str
    state_label: str
    finished: bool
    levels: list[int]
    rate_sweep: bool
    # The curve's x axis: offered request rates in a rate sweep, else concurrencies.
    x_values: list[float | None]
    x_title: str
    current_level_index: int | None
    reason: str
    started_at: float | None  # epoch seconds
    finished_at: float | None


class HeadlineFigures(TypedDict):
    """A level's headline figures, declared once: ``level_figures.LEVEL_FIGURES`` lists these
    keys in this order for the readers that go through the names (the audit, the comparison's
    means over repeats)."""

    output_tok_s: float | None
    steady_output_tok_s: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    e2e_p50_ms: float | None
    achieved_concurrency: float | None


class LevelFigures(HeadlineFigures):
    """The headline figures, the request counts and why the level was cut short: the level's
    columns as its summary fills them in (``recording.LevelColumns``) and its row on the page,
    the websocket and the API (``LevelRow``) carry them."""

    requests_ok: int
    requests_failed: int
    reason: str


class _LevelPlace(TypedDict):
    index: int
    concurrency: int
    target_rate: float | None
    x: float
    label: str
    state: str


class LevelRow(_LevelPlace, LevelFigures):
    """``selectors.level_as_dict``: a level's headline figures and where it sits on the curve
    (``x``: its offered rate in a rate sweep, else its C; ``label`` says which). The keys'
    order (its place, its figures, its times) is the API's ``LevelOut``'s."""

    started_at: float | None  # epoch seconds
    finished_at: float | None


class SweepProgress(TypedDict):
    """``selectors.sweep_progress``: level k of n and a rough time remaining (None when there
    is no basis yet; 0 once the sweep finished)."""

    level_number: int
    level_count: int
    finished_levels: int
    eta_s: float | None
    as_of: float  # epoch seconds the estimate was made at


class _SampleFigures(TypedDict):
    level_index: int
    t: float  # wall-clock epoch seconds
    concurrency: int
    phase: str  # warmup or measure
    tok_s: float
    in_flight: int
    completed: int
    errors: int
    ttft_p50: float | None
    loop_lag_ms: float | None
    client_cpu: float | None
    client_limited: bool


class LiveSample(_SampleFigures, total=False):
    """One live sample of a level as the load generator writes it (about once a second; see
    ``benchlib.loadgen.level``; the command line leaves out the first-token times behind
    ``ttft_p50``), less its event name, as the sweep page charts it. A level run
    over several processes or shards sums them into one sample and says how many it summed.

    Its figures are required here, not optional as on the wire (``events.SampleEvent``): a
    sample is stored and broadcast only once the recorder has them all, and the channel
    payload check holds every broadcast to that."""

    processes: int  # worker processes of one load generator (benchlib.loadgen.multiproc)
    shards: int  # load generators of a split level (benchmarks.sweeps.split)


class SweepSnapshot(TypedDict):
    """``selectors.sweep_snapshot``: what a viewer who joins mid-run gets first (the live
    events then follow)."""

    sweep: SweepRow
    levels: list[LevelRow]
    samples: list[JsonObject]  # LiveSample, as stored (the JSON field's contents)
    progress: SweepProgress
