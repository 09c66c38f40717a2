"""The requests of a level: which prompt the j-th request of a process takes, its body and its
record (id, slot, process).

Apart from the runner (``level.py``) because these choices are the level's identity rather
than its timing: request ids and prompt indices are what the merge of several processes'
records and a rerun with the same seed rely on to line up, so they are written once, here.
"""

from __future__ import annotations

import json

from benchlib.loadgen.apis import build_body
from benchlib.loadgen.level_config import LevelConfig
from benchlib.loadgen.prompts import PromptSource
from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.sessions import Session

DEFAULT_MAX_TOKENS = 128
LEVEL_STRIDE = 10_000_019  # prompt indices of different levels never overlap


def build_request(
    cfg: LevelConfig,
    prompts: PromptSource,
    j: int,
    warmup: bool,
    slot: int,
    *,
    prompt_index: int | None = None,
    session: Session | None = None,
) -> tuple[RequestRecord, bytes]:
    """The record and the encoded body of this process's ``j``-th request of the phase (its
    index over all processes is ``k = p + P * j``); ``prompt_index`` overrides the level's
    own (a trace's request k takes the trace's prompt k)."""
    k = cfg.process_index + cfg.process_count * j
    base = cfg.level_index * LEVEL_STRIDE
    if prompt_index is None:
        prompt_index = base - 1 - k if warmup else base + k
    prompt = prompts.get(prompt_index)
    if session is not None and session.turn == 0:
        session.begins(prompt)
    elif session is not None:
        prompt = session.follow_up(cfg.turn_tokens)
    max_tokens = cfg.max_tokens or prompt.max_tokens or DEFAULT_MAX_TOKENS
    body = build_body(
        cfg.api,
        model=cfg.model,
        prompt=prompt.text,
        max_tokens=max_tokens,
        ignore_eos=cfg.ignore_eos,
        temperature=cfg.temperature,
        extra=cfg.extra_body,
    )
    if session is not None:
        body["messages"] = session.ask(prompt.text)
    rid = f"{cfg.run_id}-{cfg.level_index}-{'w' if warmup else ''}{k}"
    rec = RequestRecord(
        request_id=rid,
        slot=cfg.slot_offset + slot,
        process=cfg.process_index,
        warmup=warmup,
        category=prompt.category,
    )
    if session is not None:
        rec.session, rec.turn = session.number, session.turn
    return rec, json.dumps(body).encode()
