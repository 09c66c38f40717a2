"""What a schedule's switch point costs the level just above it, predicted from the matrix.

A per-step schedule switches on the running batch. Under a closed loop at C the batch drops to
C-1 between one request's end and the next one's admission (the client's turnaround); where the
schedule runs another variant at C-1 than at C, every turnaround of that level runs the other
variant's step, and the newly admitted request waits for that step to end before its prefill.
On the simulator's virtual clock, where the next request arrives in the same instant, the cost
vanishes (docs/measurement.md, "Where the switches go"), which is what isolates it.

The prediction, per tested level C whose turnaround batch b = C-1 runs another variant than C:

    cost = completions per second at C x (step(turnaround variant, b) - step(own variant, b))

as a share of the level's time (each completion adds that much engine time), so the schedule
over the level's own fixed variant is predicted at 1 / (1 + cost). Every figure is the
matrix's own evidence, mean over the repeats of a level:

* completions per second at C: the own variant's output tok/s at C / its output tokens per
  request;
* a variant's step at batch b, from its level at C=b: tokens per step / per-stream output rate.
  Tokens per step is the accept length the servers' counters gave over the level (else the
  engine's per-request figure; a variant that drafts nothing makes one token a step when none
  was recorded). The per-stream rate is the decode rate, 1 / TPOT p50: each request's time per
  token after its first, so its own prefill and the client's turnaround are left out (else the
  level's output tok/s / C, which holds both, and the statement says so).

A level at C=b must have been tested for the prediction (step times are not interpolated between
levels); otherwise the statement says what is missing. The cost is negative where the
turnaround variant's step is the shorter one (a gain). A trade-off is a cost above the
decision's margin: no batch-keyed schedule then runs both neighbours on their own choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from benchlib.stats.schedule import Step


@dataclass(frozen=True)
class StepEvidence:
    """One variant's level (means over its repeats), as far as its engine step goes."""

    output_tok_s: float
    tokens_per_request: float | None  # output tokens per successful request
    tpot_ms: float | None  # per-stream time per output token after the first (p50)
    accept_length: float | None  # tokens per drafted step over the level
    accept_source: str = ""  # where accept_length comes from ("counters", "requests", ...)


@dataclass(frozen=True)
class CostVariant:
    """A matrix variant as the prediction needs it: its name, draft length, level figures
    (C -> the compared figure's point) and step evidence per C."""

    name: str
    draft_length: int
    points: Mapping[int, float]
    evidence: Mapping[int, StepEvidence]

    @property
    def short(self) -> str:
        return f"K={self.draft_length}" if self.draft_length else "off"


@dataclass(frozen=True)
class SwitchCost:
    """The predicted cost at ``concurrency`` of running ``turnaround`` (the variant the schedule
    runs at batch ``batch``) on its turnarounds instead of ``own`` (its variant at C)."""

    concurrency: int
    batch: int
    own: str  # variant names (the arms' names, as the verification's fixed arms carry them)
    turnaround: str
    own_label: str  # "off", "K=1"
    turnaround_label: str
    completions_per_s: float | None
    own_step_ms: float | None
    turnaround_step_ms: float | None
    cost: float | None  # share of the level's time; None: not predicted (``sentence`` says why)
    predicted_ratio: float | None  # schedule / own fixed variant at C: 1 / (1 + cost)
    # The levels whose own batch runs the turnaround variant in the same step: C -> its gain
    # there (turnaround variant / own variant - 1, by the points).
    gains: tuple[tuple[int, float], ...]
    trade_off: bool  # cost above the decision's margin
    sentence: str


def step_ms(variant: CostVariant, batch: int, notes: list[str]) -> float | None:
    """The variant's engine step at ``batch`` (ms) from its level at C=batch (module notes);
    fallbacks are said in ``notes``, None when no step can be read."""
    level = variant.evidence.get(batch)
    if level is None:
        tested = batch in variant.points
        notes.append(
            f"no step figures recorded for {variant.short} at C={batch}"
            if tested
            else f"no {variant.short} level at C={batch} to read its step from"
        )
        return None
    tokens = level.accept_length
    if tokens is None or tokens <= 0:
        if variant.draft_length:
            notes.append(f"no accept length recorded for {variant.short} at C={batch}")
            return None
        tokens = 1.0
        notes.append(f"{variant.short} at C={batch}: no accept length recorded, one token a step")
    if level.tpot_ms is not None and level.tpot_ms > 0:
        return tokens * level.tpot_ms
    if level.output_tok_s <= 0:
        notes.append(f"no output rate for {variant.short} at C={batch}")
        return None
    notes.append(
        f"{variant.short} at C={batch}: no TPOT, per-stream rate = output tok/s / C "
        "(holds prefill and turnaround)"
    )
    return tokens * 1000.0 * batch / level.output_tok_s


def _variant_at(steps: Sequence[Step], batch: int) -> int:
    for step in steps:
        if step.start <= batch and (step.end is None or batch <= step.end):
            return step.draft_length
    raise ValueError(f"no step covers batch {batch}")


def _step_of(steps: Sequence[Step], batch: int) -> Step:
    return next(s for s in steps if s.start <= batch and (s.end is None or batch <= s.end))


def predict_switch_costs(
    variants: Sequence[CostVariant],
    steps: Sequence[Step],
    levels: Sequence[int],
    *,
    margin: float,
) -> tuple[SwitchCost, ...]:
    """The predicted cost at every tested level (``levels``) whose turnaround batch runs another
    variant than the level's own batch size under ``steps`` (module notes)."""
    by_k = {v.draft_length: v for v in variants}
    out: list[SwitchCost] = []
    for c in sorted(levels):
        if c < 2:
            continue  # C=1 has no turnaround batch: between requests the server is idle
        b = c - 1
        own_k, turn_k = _variant_at(steps, c), _variant_at(steps, b)
        if own_k == turn_k:
            continue
        own, turn = by_k[own_k], by_k[turn_k]
        notes: list[str] = []
        turn_step = step_ms(turn, b, notes)
        own_step = step_ms(own, b, notes)
        level = own.evidence.get(c)
        completions = None
        if level is not None and level.tokens_per_request and level.output_tok_s > 0:
            completions = level.output_tok_s / level.tokens_per_request
        else:
            notes.append(f"no output tokens per request for {own.short} at C={c}")
        served = _step_of(steps, b)
        gains = tuple(
            (lv, turn.points[lv] / own.points[lv] - 1.0)
            for lv in sorted(levels)
            if served.start <= lv and (served.end is None or lv <= served.end)
            and lv in turn.points and lv in own.points and own.points[lv] > 0
        )  # fmt: skip
        gain_text = "".join(f"; C={lv} gains {g:.1%}" for lv, g in gains)
        head = f"{turn.short} at batch {b} costs C={c}"
        if completions is None or turn_step is None or own_step is None:
            sentence = f"{head} an amount not predicted ({'; '.join(notes)}){gain_text}."
            out.append(
                SwitchCost(c, b, own.name, turn.name, own.short, turn.short, completions,
                           own_step, turn_step, None, None, gains, False, sentence)
            )  # fmt: skip
            continue
        cost = completions * (turn_step - own_step) / 1000.0
        ratio = 1.0 / (1.0 + cost)
        trade_off = cost > margin
        amount = f"about {cost:.1%}" if cost >= 0 else f"nothing; it gains about {-cost:.1%}"
        sentence = (
            f"{head} {amount} (its turnarounds run the {turn.short} step: "
            f"{completions:.2f} completions/s x {turn_step - own_step:.1f} ms, steps at batch "
            f"{b} {turn.short} {turn_step:.1f} ms, {own.short} {own_step:.1f} ms; predicted "
            f"schedule / {own.short} {ratio:.3f} at C={c})"
            + (f" [{'; '.join(notes)}]" if notes else "")
            + gain_text
            + "."
        )
        out.append(
            SwitchCost(c, b, own.name, turn.name, own.short, turn.short, completions,
                       own_step, turn_step, cost, ratio, gains, trade_off, sentence)
        )  # fmt: skip
    return tuple(out)


def trade_off_text(costs: Sequence[SwitchCost], margin: float) -> str:
    """The recommendation's addition when a switch costs a neighbour more than the margin."""
    over = [c for c in costs if c.trade_off and c.cost is not None]
    if not over:
        return ""
    parts = []
    for c in over:
        gained = ", ".join(f"C={lv}'s {g:.1%}" for lv, g in c.gains)
        parts.append(
            f"C={c.concurrency} is predicted about {c.cost:.1%} behind {c.own_label}"
            + (f" for {gained}" if gained else "")
        )
    return (
        f" This is a trade-off, not a schedule never behind a fixed choice (cost above the "
        f"{margin:.0%} margin): " + "; ".join(parts) + "."
    )
