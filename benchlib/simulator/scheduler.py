from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

from .adaptive import AdaptiveSpeculation, profile_for_draft_length
from .model import TokenDraw
from .profiles import Profile

FinishReason = Literal["length", "stop", "abort"]

# Beyond this lag behind the monotonic schedule (a stalled loop, a CPU-bound fast profile) the
# schedule is re-anchored instead of replaying the missed steps back to back.
MAX_LAG_S = 0.05


class SimRequest:
    """One request's state, shared by the scheduler (producer) and its HTTP handler (consumer)."""

    __slots__ = (
        "admitted",
        "arrival",
        "cached_tokens",
        "category",
        "decode_steps",
        "done",
        "finish_reason",
        "generated",
        "kv",
        "loop",
        "max_tokens",
        "pending",
        "phase_steps",
        "prompt_tokens",
        "reasoning_tokens",
        "request_id",
        "sampled",
        "spec_accepted",
        "spec_drafted",
        "spec_steps",
        "steps",
        "target",
        "target_reason",
        "waiter",
    )

    def __init__(
        self,
        *,
        request_id: str,
        prompt_tokens: int,
        max_tokens: int,
        target: int,
        target_reason: FinishReason,
        arrival: float,
        loop: asyncio.AbstractEventLoop | None = None,
        category: str | None = None,
        cached_tokens: int = 0,
        reasoning_tokens: int = 0,
        sampled: bool = False,
    ) -> None:
        self.request_id = request_id
        # Reasoning mode: the first `reasoning_tokens` output tokens stream as reasoning (0:
        # none). A verify step that starts among them draws at the reasoning accept length, and
        # `phase_steps` counts per phase [reasoning steps, their tokens, answer steps, their
        # tokens] (a step crossing into the answer counts, all its tokens, as reasoning: its
        # draft was drafted on reasoning text): the truth log's `reasoning_verify_steps`,
        # `reasoning_step_tokens`, `answer_verify_steps` and `answer_step_tokens`.
        self.reasoning_tokens = reasoning_tokens
        self.phase_steps = [0, 0, 0, 0]
        # Sampled (temperature > 0): drafts accepted less often (Profile.sampled_accept_share).
        self.sampled = sampled
        # Prompt tokens the prefix cache held (--prefix-cache): not prefilled again.
        self.cached_tokens = cached_tokens
        self.category = category
        # Under a load-adaptive schedule: this request's verify steps as runs of
        # [running batch, draft length, steps] (the truth log's `decode_steps`).
        self.decode_steps: list[list[int]] = []
        # This request's speculative figures, as SGLang reports them per request.
        self.spec_steps = 0
        self.spec_drafted = 0
        self.spec_accepted = 0
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.target = target
        self.target_reason: FinishReason = target_reason
        self.arrival = arrival
        self.admitted: float | None = None
        self.generated = 0
        # Verify (decode) steps this request took part in: SGLang's per-request spec_verify_ct.
        self.steps = 0
        self.pending = 0
        self.done = False
        self.finish_reason: FinishReason | None = None
        self.kv = prompt_tokens + max_tokens
        self.loop = loop
        self.waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def take(self) -> int:
        """Tokens delivered since the last call, waiting for a step if there are none (0 = done)."""
        while self.pending == 0 and not self.done:
            loop = self.loop or asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()
            self.waiter = waiter
            await waiter
        n = self.pending
        self.pending = 0
        return n


class DraftTier:
    """What a step drafting ``k`` tokens per request costs and emits: its profile
    (``adaptive.profile_for_draft_length``) and seeded draws, one per prompt category."""

    __slots__ = (
        "category_draws",
        "draw",
        "k",
        "profile",
        "reasoning_draw",
        "sampled_category_draws",
        "sampled_draw",
        "sampled_reasoning_draw",
    )

    def __init__(self, profile: Profile, k: int, seed: str) -> None:
        self.k = k
        self.profile = profile
        self.draw = TokenDraw(profile, random.Random(f"{seed}:accept"))
        self.category_draws = {
            name: TokenDraw(profile, random.Random(f"{seed}:accept:{name}"), accept_length=length)
            for name, length in profile.category_accept_length
        }
        reasoning = profile.reasoning_accept_length
        self.reasoning_draw = (
            None
            if reasoning is None
            else TokenDraw(
                profile, random.Random(f"{seed}:accept:reasoning"), accept_length=reasoning
            )
        )
        # Sampled requests draw from their own seeded streams: a greedy request's draws stay
        # what they were without any sampled request beside it.
        sampled = profile.sampled_accept_length
        self.sampled_draw = TokenDraw(
            profile,
            random.Random(f"{seed}:accept:sampled"),
            accept_length=sampled(profile.accept_length),
        )
        self.sampled_category_draws = {
            name: TokenDraw(
                profile,
                random.Random(f"{seed}:accept:sampled:{name}"),
                accept_length=sampled(length),
            )
            for name, length in profile.category_accept_length
        }
        self.sampled_reasoning_draw = (
            None
            if reasoning is None
            else TokenDraw(
                profile,
                random.Random(f"{seed}:accept:sampled:reasoning"),
                accept_length=sampled(reasoning),
            )
        )


class SchedulerCore:
    """Continuous batching without a clock: admit, size a step, then advance it.

    Pure state machine shared by the asyncio driver (real time) and `simulate_closed_loop`
    (virtual time), so that tests can check the model's arithmetic deterministically.
    """

    def __init__(
        self,
        profile: Profile,
        *,
        seed: int = 0,
        eos_prob: float = 0.0,
        speculation: AdaptiveSpeculation | None = None,
    ) -> None:
        self.profile = profile
        self.speculation = speculation
        # A server with a drafter counts verify steps even where a schedule drafts nothing.
        self.speculative = profile.speculative and profile.spec_steps > 0
        own = profile.spec_steps if self.speculative else 0
        # The profile's own draft length keeps the profile's seeds, so that a schedule drafting
        # it at every batch size reproduces the profile draw for draw.
        self._tiers = {own: DraftTier(profile, own, str(seed))}
        for k in sorted(set(speculation.lengths) - {own}) if speculation else ():
            self._tiers[k] = DraftTier(profile_for_draft_length(profile, k), k, f"{seed}:k{k}")
        # The draft length of the step being run: chosen from the running batch when the step
        # is sized (step_seconds), used when it is advanced.
        self.draft_length = speculation.draft_length(1) if speculation else own
        self._tier = self._tiers[self.draft_length]
        self.steps_by_draft_length: dict[int, int] = {}
        self._eos_rng = random.Random(f"{seed}:eos")
        self.eos_prob = eos_prob
        self.queue: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.kv_used = 0
        # Lifetime counters (metrics and /server_info read them).
        self.steps = 0
        self.request_steps = 0
        # Request-steps after each request's first token (which prefill produces, undrafted).
        self.verify_steps = 0
        # Request-steps that drafted (K > 0): what vLLM's spec_decode counters count.
        self.draft_steps = 0
        self.generated_tokens = 0
        self.prompt_tokens = 0
        self.spec_accepted = 0
        self.spec_draft_tokens = 0
        self.finished = 0
        self.aborted = 0

    def target_length(self, max_tokens: int, ignore_eos: bool) -> tuple[int, FinishReason]:
        """Output length: max_tokens, or an earlier seeded pseudo-EOS when eos_prob > 0."""
        if ignore_eos or self.eos_prob <= 0.0:
            return max_tokens, "length"
        if self.eos_prob >= 1.0:
            return 1, "stop"
        u = self._eos_rng.random()
        n = 1 + int(math.log1p(-u) / math.log1p(-self.eos_prob))
        if n < max_tokens:
            return n, "stop"
        return max_tokens, "length"

    def submit(self, req: SimRequest) -> None:
        self.queue.append(req)

    def abort(self, req: SimRequest) -> None:
        if req.done:
            return
        req.done = True
        req.finish_reason = "abort"
        self.aborted += 1
        if req.admitted is None:
            with contextlib.suppress(ValueError):
                self.queue.remove(req)
        else:
            try:
                self.running.remove(req)
                self.kv_used -= req.kv
            except ValueError:
                pass
        req.wake()

    def admit(self, now: float) -> list[SimRequest]:
        admitted: list[SimRequest] = []
        queue, running = self.queue, self.running
        limit, budget = self.profile.max_running, self.profile.kv_tokens
        while queue and len(running) < limit:
            req = queue[0]
            if self.kv_used + req.kv > budget:
                break
            queue.popleft()
            running.append(req)
            self.kv_used += req.kv
            self.prompt_tokens += req.prompt_tokens
            req.admitted = now
            admitted.append(req)
        return admitted

    def step_seconds(self, admitted: list[SimRequest]) -> float:
        """Size the next step; under a schedule its draft length comes from the running batch
        as the engines pick it (adaptive.AdaptiveSpeculation.draft_length)."""
        batch = len(self.running)
        if self.speculation is not None and batch:
            self.draft_length = self.speculation.draft_length(batch)
            self._tier = self._tiers[self.draft_length]
        profile = self._tier.profile
        seconds = profile.step_seconds(batch)
        for req in admitted:
            seconds += profile.prefill_seconds(req.prompt_tokens - req.cached_tokens)
        return seconds

    def advance(self) -> list[SimRequest]:
        """Emit one step's tokens to every running request; returns those that finished."""
        finished: list[SimRequest] = []
        keep: list[SimRequest] = []
        tier = self._tier
        spec = self.speculative
        drafting = tier.draw.speculative
        draw = tier.draw.draw
        categories = tier.category_draws
        reasoning_draw = tier.reasoning_draw
        sampled_reasoning = tier.sampled_reasoning_draw
        emitted = 0
        steps = tier.k
        verifies = 0
        batch = len(self.running)
        record = self.speculation is not None
        for req in self.running:
            # A request's first token comes from its prefill, as in the engines: one token,
            # no draft, no verify step. Every later step is a verify step when speculating,
            # drawn in a reasoning phase at the reasoning accept length when the profile has
            # one, else from the request's own category when it has one.
            first = req.generated == 0
            reasoning = req.generated < req.reasoning_tokens
            if first:
                n = 1
            else:
                # A sampled request draws from the sampled streams (Profile.sampled_accept_share)
                # and is a verify step like any other: it counts in the server's counters.
                if req.sampled:
                    by_category, phase_draw = tier.sampled_category_draws, sampled_reasoning
                else:
                    by_category, phase_draw = categories, reasoning_draw
                own = by_category.get(req.category) if req.category is not None else None
                if reasoning and phase_draw is not None:
                    own = phase_draw
                if own is not None:
                    n = own.draw()
                elif not drafting:
                    n = 1
                else:
                    n = tier.sampled_draw.draw() if req.sampled else draw()
                req.steps += 1
                verifies += 1
                if record:
                    runs = req.decode_steps
                    if runs and runs[-1][0] == batch and runs[-1][1] == steps:
                        runs[-1][2] += 1
                    else:
                        runs.append([batch, steps, 1])
            remaining = req.target - req.generated
            if n >= remaining:
                n = remaining
                req.done = True
                req.finish_reason = req.target_reason
                finished.append(req)
            else:
                keep.append(req)
            if req.reasoning_tokens and not first:
                phase = req.phase_steps
                at = 0 if reasoning else 2
                phase[at] += 1
                phase[at + 1] += n
            req.generated += n
            req.pending += n
            if spec and not first:
                req.spec_steps += 1
                req.spec_drafted += steps
                req.spec_accepted += n - 1
            emitted += n
            req.wake()
        self.running = keep
        for req in finished:
            self.kv_used -= req.kv
        self.steps += 1
        self.steps_by_draft_length[steps] = self.steps_by_draft_length.get(steps, 0) + 1
        self.request_steps += batch
        self.verify_steps += verifies
        self.generated_tokens += emitted
        self.finished += len(finished)
        if drafting:
            self.draft_steps += verifies
            self.spec_accepted += emitted - batch
            self.spec_draft_tokens += verifies * steps
        return finished


class AsyncScheduler:
    """Drives a SchedulerCore on the event loop, sleeping to a drift-free monotonic schedule."""

    def __init__(
        self,
        core: SchedulerCore,
        *,
        on_switch: Callable[[float, int, int, int], None] | None = None,
    ) -> None:
        self.core = core
        self.lag_resets = 0
        # Under a load-adaptive schedule: called as (time, draft length before, after, running
        # batch) when a step drafts another length than the step before it (the controller's
        # switch, stamped when the step that runs the new length is sized).
        self.on_switch = on_switch
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.ensure_future(self._run())

    def submit(self, req: SimRequest) -> None:
        self.start()
        self.core.submit(req)
        assert self._wake is not None
        self._wake.set()

    def abort(self, req: SimRequest) -> None:
        self.core.abort(req)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        core = self.core
        wake = self._wake
        assert wake is not None
        next_at = loop.time()
        while True:
            if not core.running and not core.queue:
                wake.clear()
                await wake.wait()
                next_at = loop.time()
            admitted = core.admit(time.time())
            if not core.running:
                # Queued requests that do not fit cannot exist (validated at submit); be safe.
                wake.clear()
                await wake.wait()
                continue
            before = core.draft_length
            next_at += core.step_seconds(admitted)
            if core.draft_length != before and self.on_switch is not None:
                self.on_switch(time.time(), before, core.draft_length, len(core.running))
            now = loop.time()
            if next_at < now - MAX_LAG_S:
                self.lag_resets += 1
                next_at = now
            delay = next_at - now
            await asyncio.sleep(delay if delay > 0.0 else 0.0)
            core.advance()
