"""The README's A/B walkthrough asks the scenario's question ("EAGLE-3 wins at one stream: does
it still win under load?"), so its load must let the shipped simulated profiles answer it: on
the simulator's own model (the virtual clock, no machine noise) EAGLE-3 is ahead at C=1 by more
than the decision's margin and behind beyond it at every higher level. Short answers would not
do: EAGLE-3's first token is slower, and with 32 output tokens that alone makes it lose at one
stream. The load is read from the README, so editing the walkthrough re-checks it."""

from __future__ import annotations

import re
from pathlib import Path

from benchlib.simulator.profiles import get_profile
from benchlib.simulator.virtual import simulate_closed_loop
from benchlib.stats.decision import DEFAULT_MARGIN

README = Path(__file__).resolve().parents[3] / "README.md"


def _walkthrough_load() -> tuple[list[int], int, int]:
    text = README.read_text(encoding="utf-8")
    section = text.split("### An A/B experiment", 1)[1].split("\n2. ", 1)[0]
    section = " ".join(section.split())
    levels = re.search(r"levels `([\d, ]+)`", section)
    tokens = re.search(r"(\d+) input and (\d+) output tokens", section)
    assert levels and tokens, "the walkthrough no longer states its levels and token counts"
    return (
        [int(c) for c in levels.group(1).split(",")],
        int(tokens.group(1)),
        int(tokens.group(2)),
    )


def _ratio(concurrency: int, prompt_tokens: int, output_tokens: int) -> float:
    def run(profile: str) -> float:
        return simulate_closed_loop(
            get_profile(profile),
            concurrency,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            duration_s=120.0,
        ).output_tok_s

    return run("eagle3") / run("baseline")


def test_the_walkthrough_load_shows_eagle3_ahead_at_one_stream_and_behind_above() -> None:
    levels, prompt_tokens, output_tokens = _walkthrough_load()
    assert levels[0] == 1 and len(levels) >= 3
    ratios = {c: _ratio(c, prompt_tokens, output_tokens) for c in levels}
    assert ratios[1] > 1.0 + DEFAULT_MARGIN, ratios
    assert all(ratios[c] < 1.0 - DEFAULT_MARGIN for c in levels[1:]), ratios


def test_short_answers_would_not_show_it() -> None:
    # The reason the walkthrough asks for long answers: at 32 output tokens the slower first
    # token outweighs the faster decode even at one stream.
    assert _ratio(1, 32, 32) < 1.0
