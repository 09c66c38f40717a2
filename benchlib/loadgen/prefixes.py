from __future__ import annotations

# Shared prefixes: a common system prompt ahead of a share of the requests, the usual production
# shape, so the server's prefix cache decides part of every TTFT (SGLang's `--gsp-*` generated
# shared prefixes are the same idea).
#
# `count` prefixes of `tokens` common words (one token each, as the synthetic set) go ahead of
# the base prompt of a share `share` of the requests: request i carries one when
# floor((i + 1) * share) > floor(i * share), so any run of consecutive indices holds that share
# exactly, and the prefixed requests take the prefixes in turn. Everything depends only on
# (seed, index): every arm of an experiment sends the same prompts.
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from benchlib.loadgen.prompts import _WORDS, Prompt, PromptSource


@dataclass(frozen=True)
class SharedPrefixPrompts:
    base: PromptSource
    count: int
    tokens: int
    share: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.count < 1 or self.tokens < 1:
            raise ValueError("shared prefixes need a count and a length of at least 1")
        if not 0.0 <= self.share <= 1.0:
            raise ValueError("the share of requests with a prefix is between 0 and 1")

    @cached_property
    def prefixes(self) -> tuple[str, ...]:
        return tuple(
            " ".join(random.Random(f"{self.seed}:prefix:{j}").choices(_WORDS, k=self.tokens))
            for j in range(self.count)
        )

    def prefix_of(self, index: int) -> int | None:
        """Which prefix request `index` carries (None: none)."""
        before = math.floor(index * self.share)
        if math.floor((index + 1) * self.share) == before:
            return None
        return before % self.count

    def get(self, index: int) -> Prompt:
        prompt = self.base.get(index)
        j = self.prefix_of(index)
        if j is None:
            return prompt
        return Prompt(f"{self.prefixes[j]} {prompt.text}", prompt.max_tokens, prompt.category)

    def expected_hit_rate(self, indices: Iterable[int]) -> float:
        """The share of prompt tokens a server's prefix cache finds when these requests come
        one after another and it keeps every prefix it has seen: each prefix's later uses hit
        its whole length, its first misses. Lengths in words (one token each for the synthetic
        set); a cache that keeps whole blocks only rounds each hit down to a block."""
        seen: set[int] = set()
        hits = queried = 0
        for index in indices:
            queried += len(self.base.get(index).text.split(" "))
            j = self.prefix_of(index)
            if j is None:
                continue
            queried += self.tokens
            if j in seen:
                hits += self.tokens
            seen.add(j)
        return hits / queried if queried else 0.0
