from __future__ import annotations

# Prompt sources: synthetic prompts of a target length, JSONL files and ShareGPT files.
#
# Every source is indexed by an integer and deterministic for a given seed, so a run, a rerun and
# each worker process of a split level all draw the same prompts for the same indices.
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

# Short, common English words: with the usual BPE vocabularies each is one token when it follows
# a space, so N words make a prompt of about N tokens. The server's usage.prompt_tokens is the
# authoritative count and is recorded per request.
_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her are be this have not but "
    "had they which one you were all she there would their we him been has when who will more "
    "no if out so said what up its about into than them can only other new some could time "
    "these two may then do first any my now such like our over man me even most made after also "
    "did many before must through back years where much your way well down should because each "
    "just those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three"
)
_WORDS = tuple(_WORD_TEXT.split())
# A category travels in an HTTP header (X-Specdash-Category): plain, short names only.
CATEGORY_RE = re.compile(r"[A-Za-z0-9_.-]{1,40}")


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    max_tokens: int | None = None  # the dataset's output length, when it gives one
    category: str = "synthetic"  # what kind of text it is: synthetic, chat, code, ...
    # A recorded conversation's turns, (question, recorded reply or None), the first being
    # `text`: a multi-turn session sends them in order (benchlib.loadgen.sessions). Empty for a
    # single prompt.
    turns: tuple[tuple[str, str | None], ...] = ()


class PromptSource(Protocol):
    def get(self, index: int) -> Prompt: ...


@dataclass(frozen=True, slots=True)
class SyntheticPrompts:
    """`input_tokens` random common words; `get(i)` depends only on (seed, i)."""

    input_tokens: int
    seed: int = 0

    def get(self, index: int) -> Prompt:
        rng = random.Random(f"{self.seed}:{index}")
        return Prompt(
            " ".join(rng.choices(_WORDS, k=max(1, self.input_tokens))), category="synthetic"
        )


@dataclass(frozen=True, slots=True)
class DatasetPrompts:
    """A fixed list, shuffled once by the seed; indices wrap around."""

    prompts: tuple[Prompt, ...]

    def get(self, index: int) -> Prompt:
        return self.prompts[index % len(self.prompts)]


def estimate_tokens(text: str) -> int:
    """About four characters per token: used only for dataset output lengths, never for results."""
    return max(1, round(len(text) / 4))


def _shuffled(prompts: list[Prompt], seed: int, path: Path) -> DatasetPrompts:
    if not prompts:
        raise ValueError(f"{path}: no usable prompts")
    random.Random(seed).shuffle(prompts)
    return DatasetPrompts(tuple(prompts))


def load_jsonl(path: Path, *, seed: int = 0) -> DatasetPrompts:
    """Lines of `{"prompt": "...", "max_tokens": n, "category": "..."}` (the last two optional)."""
    prompts: list[Prompt] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
                raise ValueError(f"{path}:{lineno}: expected an object with a string 'prompt'")
            mt = obj.get("max_tokens")
            category = str(obj.get("category") or "custom")
            if not CATEGORY_RE.fullmatch(category):
                raise ValueError(f"{path}:{lineno}: category must match {CATEGORY_RE.pattern}")
            prompts.append(Prompt(obj["prompt"], int(mt) if mt is not None else None, category))
    return _shuffled(prompts, seed, path)


def _said(turn: Any, speaker: str) -> str | None:
    """A ShareGPT turn's text when `speaker` said it (non-blank), else None."""
    if isinstance(turn, dict) and turn.get("from") == speaker:
        value = turn.get("value")
        if isinstance(value, str) and value.strip():
            return value
    return None


def sharegpt_conversation(turns: list[Any], start: int) -> tuple[tuple[str, str | None], ...]:
    """The conversation's (human, gpt) exchanges from the human turn at `start`, in order,
    while they alternate; the last question may have no recorded reply."""
    out: list[tuple[str, str | None]] = []
    i = start
    while i < len(turns):
        question = _said(turns[i], "human")
        if question is None:
            break
        reply = _said(turns[i + 1], "gpt") if i + 1 < len(turns) else None
        out.append((question, reply))
        if reply is None:
            break
        i += 2
    return tuple(out)


def sharegpt_prompt(item: Any) -> Prompt | None:
    """ShareGPT: the first human turn is the prompt, the reply after it gives the output length;
    the exchanges that follow while human and gpt alternate are its `turns` (the conversation a
    multi-turn session replays)."""
    turns = item.get("conversations") if isinstance(item, dict) else None
    if not isinstance(turns, list):
        return None
    for i, turn in enumerate(turns):
        if isinstance(turn, dict) and turn.get("from") == "human":
            value = _said(turn, "human")
            if value is None:
                return None
            conversation = sharegpt_conversation(turns, i)
            reply = conversation[0][1]
            out = estimate_tokens(reply) if reply is not None else None
            return Prompt(value, out, "chat", conversation if len(conversation) > 1 else ())
    return None


def load_sharegpt(path: Path, *, seed: int = 0) -> DatasetPrompts:
    data: Any = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of conversations")
    prompts = [p for p in map(sharegpt_prompt, data) if p is not None]
    return _shuffled(prompts, seed, path)


def load_dataset(path: Path, fmt: str, *, seed: int = 0) -> DatasetPrompts:
    if fmt == "jsonl":
        return load_jsonl(path, seed=seed)
    if fmt == "sharegpt":
        return load_sharegpt(path, seed=seed)
    raise ValueError(f"unknown dataset format {fmt!r}")
