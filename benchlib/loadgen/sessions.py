from __future__ import annotations

# Multi-turn sessions: each turn sends the whole conversation so far as chat messages, so the
# server's prefix cache decides how much of it is prefilled again (its TTFT), as in a chat
# product. A session's first turn is the prompt set's prompt; its follow-ups are `turn_tokens`
# common words each. The answers in the history are stand-ins of the answer's length (common
# words, one token each): the client does not keep the text it streams. A server that caches its
# own generated tokens therefore finds the history cached up to the previous question, not
# through the previous answer; the figures per turn say what that costs. A prompt from a
# recorded conversation (ShareGPT's multi-turn records) scripts its session instead: the
# recorded questions in order, the recorded replies as the history (see Session).
import random
from collections.abc import Iterable

from benchlib.loadgen.metrics import distribution
from benchlib.loadgen.prompts import _WORDS, Prompt, estimate_tokens
from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.summary import SessionFigures, TurnFigures
from benchlib.stats.intervals import quantile


class Session:
    """One conversation's history; `turn` is the turn being sent (0: the first).

    A session whose first prompt carries a recorded conversation (`Prompt.turns`, ShareGPT's
    multi-turn records) follows its `script`: turn k asks the recorded k-th question with the
    recorded reply's length as its output length, and the history holds the recorded replies,
    so the session is as long as the conversation (at most the level's turns). Without one,
    the follow-ups are generated words and the answers stand-ins of the answer's length."""

    __slots__ = ("messages", "number", "script", "seed", "turn")

    def __init__(self, number: int, *, seed: int = 0) -> None:
        self.number = number
        self.seed = seed
        self.turn = 0
        self.messages: list[dict[str, str]] = []
        self.script: tuple[tuple[str, str | None], ...] = ()

    def begins(self, prompt: Prompt) -> None:
        """Turn 0's prompt: its recorded conversation, if any, scripts the session."""
        self.script = prompt.turns

    def ended(self) -> bool:
        """Whether a scripted session has asked every recorded question (the conversation
        ends at its first question without a recorded reply)."""
        return bool(self.script) and self.turn >= len(self.script)

    def follow_up(self, tokens: int) -> Prompt:
        if self.script and self.turn < len(self.script):
            question, reply = self.script[self.turn]
            return Prompt(question, estimate_tokens(reply) if reply else None, "chat")
        rng = random.Random(f"{self.seed}:session:{self.number}:{self.turn}")
        return Prompt(" ".join(rng.choices(_WORDS, k=max(1, tokens))), category="chat")

    def ask(self, text: str) -> list[dict[str, str]]:
        """The messages of this turn: the history, then this question (kept in the history)."""
        self.messages.append({"role": "user", "content": text})
        return list(self.messages)

    def answered(self, request_id: str, tokens: int) -> None:
        if self.script and self.turn < len(self.script):
            recorded = self.script[self.turn][1]
            if recorded is not None:
                self.messages.append({"role": "assistant", "content": recorded})
                return
        rng = random.Random(f"{self.seed}:answer:{request_id}")
        words = " ".join(rng.choices(_WORDS, k=max(1, tokens)))
        self.messages.append({"role": "assistant", "content": words})


def turn_figures(records: Iterable[RequestRecord]) -> list[TurnFigures]:
    """Per turn index (0: first): requests, ok, prompt tokens (mean, from the server's usage),
    TTFT p50 and p99 (ms), over the measured requests of the level's sessions."""
    by_turn: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.turn is not None and not r.warmup:
            by_turn.setdefault(r.turn, []).append(r)
    rows: list[TurnFigures] = []
    for turn in sorted(by_turn):
        recs = by_turn[turn]
        ok = [r for r in recs if r.ok]
        ttfts = sorted((r.first_token - r.start) * 1e3 for r in ok if r.first_token is not None)
        prompts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
        rows.append(
            TurnFigures(
                turn=turn,
                requests=len(recs),
                ok=len(ok),
                prompt_tokens_mean=sum(prompts) / len(prompts) if prompts else None,
                ttft_p50_ms=quantile(ttfts, 0.5) if ttfts else None,
                ttft_p99_ms=quantile(ttfts, 0.99) if ttfts else None,
            )
        )
    return rows


def session_figures(records: Iterable[RequestRecord]) -> SessionFigures | None:
    """Per session, over the level's measured sessions (None: the level ran none): how many
    there were and how many had every turn succeed, turns per session, the session's length
    (first turn sent to last answer, s), and its later turns' mean TTFT over its first turn's
    (below 1: the cached history answered sooner; only sessions with a later turn and a first
    token on turn 0)."""
    by_session: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.session is not None and not r.warmup:
            by_session.setdefault(r.session, []).append(r)
    if not by_session:
        return None
    lengths, turns, later_over_first = [], [], []
    complete = 0
    for recs in by_session.values():
        complete += all(r.ok for r in recs)
        turns.append(float(len(recs)))
        lengths.append(max(r.end for r in recs) - min(r.start for r in recs))
        ttft = {
            r.turn: r.first_token - r.start
            for r in recs
            if r.ok and r.turn is not None and r.first_token is not None
        }
        first = ttft.pop(0, None)
        if first and ttft:
            later_over_first.append(sum(ttft.values()) / len(ttft) / first)
    return SessionFigures(
        sessions=len(by_session),
        complete=complete,
        turns=distribution(turns),
        duration_s=distribution(lengths),
        later_over_first_ttft=distribution(later_over_first),
    )
