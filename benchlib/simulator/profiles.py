from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """Parameters of the simulated engine's performance model (times in milliseconds)."""

    name: str
    t0_ms: float
    k_ms: float
    max_running: int
    kv_tokens: int
    prefill_base_ms: float = 0.5
    prefill_per_token_us: float = 20.0
    speculative: bool = False
    accept_length: float = 1.0
    spec_steps: int = 0
    # Accept length per prompt category (the X-Specdash-Category request header): acceptance
    # depends on what is asked (filler, chat, code). Other categories use `accept_length`.
    category_accept_length: tuple[tuple[str, float], ...] = ()
    # Accept length of the verify steps that start in a request's reasoning phase (reasoning
    # mode, --reasoning-tokens): speculation behaves differently on reasoning text than on the
    # answer. None: as the answer (the category's or `accept_length`).
    reasoning_accept_length: float | None = None
    # Sampling weakens speculation: a request that samples (temperature > 0) keeps this share of
    # the drafted tokens' gain, accept length 1 + share * (L - 1), its category's L included
    # (``sampled_accept_length``). A simulator default that makes sampling cost acceptance, not a
    # measurement of any engine: set it from a real server's greedy and sampled figures. A
    # request without a temperature is treated as greedy here (engines' own default is
    # usually 1.0: the load generator sends one only when it is given).
    sampled_accept_share: float = 0.6
    # The step cost of the same server when a step drafts nothing (a load-adaptive schedule's
    # K=0): the cost model per draft length (adaptive.profile_for_draft_length) runs from it to
    # t0/k at `spec_steps`. None: not calibrated, so no other draft length can be simulated.
    off_t0_ms: float | None = None
    off_k_ms: float | None = None
    description: str = ""

    def step_seconds(self, batch: float) -> float:
        return (self.t0_ms + self.k_ms * batch) / 1000.0

    def prefill_seconds(self, prompt_tokens: int) -> float:
        return (self.prefill_base_ms + self.prefill_per_token_us * prompt_tokens / 1000.0) / 1000.0

    def sampled_accept_length(self, accept_length: float) -> float:
        """The accept length of a sampled request where a greedy one's is ``accept_length``."""
        return 1.0 + self.sampled_accept_share * (accept_length - 1.0)

    def tokens_per_step(self) -> float:
        return self.accept_length if self.speculative else 1.0

    def replace(self, **changes: object) -> Profile:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def linear_step_from_targets(
    *, single_stream: float, at_cap: float, cap: int, tokens_per_step: float
) -> tuple[float, float]:
    """Solve t(b) = t0 + k*b (ms) so b*L/t(b) is `single_stream` at b=1 and `at_cap` at b=cap."""
    t1 = 1000.0 * tokens_per_step / single_stream
    tcap = 1000.0 * cap * tokens_per_step / at_cap
    k = (tcap - t1) / (cap - 1)
    return t1 - k, k


# Derivation (see docs/simulator.md): single-stream decode and the throughput at the batch cap
# (256 running requests) come from docs' scenario figures; t0 and k follow from the two equations.
_CAP = 256


def _fitted_step(
    *, single_stream: float, at_cap: float, tokens_per_step: float
) -> tuple[float, float]:
    """t0 and k (ms) through the two scenario figures, rounded as the profiles state them."""
    t0, k = linear_step_from_targets(
        single_stream=single_stream, at_cap=at_cap, cap=_CAP, tokens_per_step=tokens_per_step
    )
    return round(t0, 4), round(k, 5)


_BASE_T0_MS, _BASE_K_MS = _fitted_step(single_stream=92.6, at_cap=773.0, tokens_per_step=1.0)
_EAGLE_L = 2.6
_EAGLE_T0_MS, _EAGLE_K_MS = _fitted_step(single_stream=96.1, at_cap=354.0, tokens_per_step=_EAGLE_L)

PROFILES: dict[str, Profile] = {
    "baseline": Profile(
        name="baseline",
        t0_ms=_BASE_T0_MS,
        k_ms=_BASE_K_MS,
        max_running=_CAP,
        kv_tokens=2_000_000,
        description="no speculation: 92.6 tok/s single stream, ~773 tok/s at 256 running",
    ),
    "eagle3": Profile(
        name="eagle3",
        t0_ms=_EAGLE_T0_MS,
        k_ms=_EAGLE_K_MS,
        max_running=_CAP,
        kv_tokens=1_500_000,
        speculative=True,
        accept_length=_EAGLE_L,
        spec_steps=3,
        # Differs from the answer's 2.6 so that per-phase figures show the effect in reasoning
        # mode; an illustration, not a measurement of any drafter on reasoning text.
        reasoning_accept_length=3.2,
        # A step without drafts costs a baseline step (the same target model, same server).
        off_t0_ms=_BASE_T0_MS,
        off_k_ms=_BASE_K_MS,
        description="EAGLE-3 (3 draft steps, accept length 2.6): 96.1 tok/s single, ~354 saturated",
    ),
    "fast": Profile(
        name="fast",
        t0_ms=0.05,
        k_ms=0.0,
        max_running=4096,
        kv_tokens=1_000_000_000,
        prefill_base_ms=0.0,
        prefill_per_token_us=0.0,
        description="near-zero model cost and a huge batch: for measuring the client",
    ),
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown profile {name!r} (known: {known})") from None
