"""Shared prefixes: the share of requests that carry one is exact over any run of requests,
each prefix's words are the same wherever it appears, and the hit rate the workload is built
to produce follows from its count, length and share."""

from __future__ import annotations

import pytest

from benchlib.loadgen.cli_args import build_parser, prompts_from_args
from benchlib.loadgen.prefixes import SharedPrefixPrompts
from benchlib.loadgen.prompts import SyntheticPrompts


def test_the_share_is_exact_and_the_prefixes_take_turns() -> None:
    prompts = SharedPrefixPrompts(SyntheticPrompts(10), count=3, tokens=20, share=0.75)
    carried = [prompts.prefix_of(i) for i in range(1000, 1040)]
    assert sum(j is not None for j in carried) == 30
    assert [j for j in carried if j is not None][:6] == [0, 1, 2, 0, 1, 2]


def test_a_prefixed_prompt_is_its_prefix_then_the_base_prompt() -> None:
    base = SyntheticPrompts(10, seed=4)
    prompts = SharedPrefixPrompts(base, count=2, tokens=20, share=0.5, seed=4)
    with_prefix = [i for i in range(10) if prompts.prefix_of(i) == 0]
    words = [prompts.get(i).text.split(" ") for i in with_prefix[:2]]
    assert [len(w) for w in words] == [30, 30]
    assert words[0][:20] == words[1][:20] == prompts.prefixes[0].split(" ")
    assert words[0][20:] == base.get(with_prefix[0]).text.split(" ")
    without = next(i for i in range(10) if prompts.prefix_of(i) is None)
    assert prompts.get(without) == base.get(without)
    assert prompts.prefixes[0] != prompts.prefixes[1]


def test_the_expected_hit_rate_counts_each_prefixs_first_use_as_a_miss() -> None:
    prompts = SharedPrefixPrompts(SyntheticPrompts(40), count=4, tokens=200, share=0.75)
    # 64 requests: 48 with a prefix (4 first uses), 16 without; 40 words of their own each.
    expected = (44 * 200) / (48 * 200 + 64 * 40)
    assert prompts.expected_hit_rate(range(64)) == pytest.approx(expected)
    assert (
        SharedPrefixPrompts(SyntheticPrompts(40), count=4, tokens=200, share=0.0).expected_hit_rate(
            range(64)
        )
        == 0.0
    )


def test_settings_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        SharedPrefixPrompts(SyntheticPrompts(4), count=1, tokens=4, share=1.5)
    with pytest.raises(ValueError, match="at least 1"):
        SharedPrefixPrompts(SyntheticPrompts(4), count=0, tokens=4)


def test_the_cli_wraps_its_prompts_in_the_shared_prefixes() -> None:
    args = build_parser().parse_args(
        ["--base-url", "http://x", "--requests-per-level", "4", "--input-tokens", "8",
         "--prefix-count", "2", "--prefix-tokens", "16", "--prefix-share", "0.5"]
    )  # fmt: skip
    prompts = prompts_from_args(args)
    assert isinstance(prompts, SharedPrefixPrompts)
    assert (prompts.count, prompts.tokens, prompts.share) == (2, 16, 0.5)
    assert len(prompts.get(1).text.split(" ")) == 24
