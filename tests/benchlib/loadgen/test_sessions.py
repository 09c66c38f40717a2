"""Multi-turn sessions: each turn carries the conversation so far, every turn of a session goes
out from one slot, think time sits between turns, and on a server with a prefix cache (the
simulator's) the later turns, whose history is cached, have a lower TTFT than the first."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchlib.loadgen import cli
from benchlib.loadgen.cli_args import build_parser
from benchlib.loadgen.events import EventWriter
from benchlib.loadgen.prompts import estimate_tokens, sharegpt_prompt
from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.sessions import session_figures
from benchlib.loadgen.settings import LoadSettings, LoadSettingsError
from tests.benchlib.loadgen.conftest import make_record
from tests.benchlib.loadgen.stub_server import StubServer
from tests.fixtures.ports import free_port

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def caching_simulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The simulator with its chat prefix cache, prefill at 300 us a prompt token."""
    tmp = tmp_path_factory.mktemp("sessions")
    truth = tmp / "truth.jsonl"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port", str(port),
         "--t0-ms", "2", "--k-ms", "0", "--prefill-per-token-us", "300", "--prefix-cache",
         "--metrics-style", "vllm", "--truth-log", str(truth), "--workers", "0",
         "--state-dir", str(tmp / "state")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, "simulator exited"
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "simulator not up"
        time.sleep(0.1)
    yield url, truth
    proc.terminate()
    proc.wait(10)


async def test_later_turns_find_their_history_cached_and_answer_sooner(
    caching_simulator: tuple[str, Path], tmp_path: Path
) -> None:
    url, truth_path = caching_simulator
    out, records = tmp_path / "out.json", tmp_path / "records.jsonl"
    args = build_parser().parse_args(
        ["--base-url", url, "--model", "specdash-sim", "--api", "chat", "--concurrency", "2",
         "--requests-per-level", "8", "--input-tokens", "400", "--max-tokens", "16",
         "--ignore-eos", "--session-turns", "4", "--turn-tokens", "16", "--think-time", "0.05",
         "--output", str(out), "--records", str(records), "--quiet"]
    )  # fmt: skip
    assert await cli.run(args, EventWriter(None), None) == cli.EXIT_OK
    turns = json.loads(out.read_text())["levels"][0]["turns"]
    assert [t["turn"] for t in turns] == [0, 1, 2, 3]
    assert all(t["ok"] == 2 for t in turns)
    # The history is carried: each turn's prompt is longer than the one before.
    prompts = [t["prompt_tokens_mean"] for t in turns]
    assert prompts == sorted(prompts) and prompts[3] > prompts[0] + 3 * 16
    # ~530 prompt tokens prefilled at turn 0 (160 ms); later turns prefill only what is new.
    assert all(t["ttft_p50_ms"] < turns[0]["ttft_p50_ms"] for t in turns[1:])
    sessions = json.loads(out.read_text())["levels"][0]["sessions"]
    assert (sessions["sessions"], sessions["complete"], sessions["turns"]["mean"]) == (2, 2, 4.0)
    assert sessions["later_over_first_ttft"]["max"] < 1.0
    assert sessions["duration_s"]["min"] >= 3 * 0.05  # three think times at least
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    truth = {}
    for line in truth_path.read_text().splitlines():
        row = json.loads(line)
        truth[row["request_id"]] = row
    # (start, end, turn, slot) of each session's requests
    by_session: dict[int, list[tuple[float, float, int, int]]] = {}
    for r in rows:
        turn_row = (float(r["start"]), float(r["end"]), int(r["turn"]), int(r["slot"]))
        by_session.setdefault(int(r["session"]), []).append(turn_row)
        cached = truth[r["id"]]["cached_tokens"]
        assert (cached == 0) if r["turn"] == 0 else (cached > 0)
    assert len(by_session) == 2
    for turns_of in by_session.values():
        assert len({slot for *_, slot in turns_of}) == 1  # sticky: one slot for the session
        ordered = sorted(turns_of)
        assert [turn for _, _, turn, _ in ordered] == [0, 1, 2, 3]
        gaps = [b[0] - a[1] for a, b in itertools.pairwise(ordered)]
        assert min(gaps) >= 0.05  # the think time


async def test_each_turn_sends_the_whole_conversation(stub: StubServer) -> None:
    args = build_parser().parse_args(
        ["--base-url", stub.base_url, "--model", "m", "--api", "chat", "--concurrency", "1",
         "--requests-per-level", "3", "--input-tokens", "5", "--max-tokens", "4",
         "--session-turns", "3", "--turn-tokens", "2", "--quiet"]
    )  # fmt: skip
    assert await cli.run(args, EventWriter(None), None) == cli.EXIT_OK
    roles = [[m["role"] for m in body["messages"]] for body in stub.state.bodies]
    assert roles == [["user"], ["user", "assistant", "user"],
                     ["user", "assistant", "user", "assistant", "user"]]  # fmt: skip
    first, last = stub.state.bodies[0]["messages"], stub.state.bodies[2]["messages"]
    assert last[0] == first[0]  # the same first question, turn after turn
    assert len(last[1]["content"].split(" ")) == 4  # the answer's stand-in: its length
    assert len(last[2]["content"].split(" ")) == 2


def test_sessions_need_the_chat_api_and_a_closed_loop() -> None:
    with pytest.raises(LoadSettingsError) as info:
        LoadSettings.clean({"requests_per_level": 4, "session_turns": 3})
    assert "chat" in " ".join(info.value.errors["session_turns"])
    with pytest.raises(LoadSettingsError):
        LoadSettings.clean(
            {"requests_per_level": 4, "session_turns": 3, "api": "chat", "request_rate": 2}
        )


def test_session_figures_take_each_session_from_its_first_send_to_its_last_answer() -> None:
    def turn(
        rid: str, session: int, number: int, start: float, ttft: float,
        error_kind: str | None = None, warmup: bool = False,
    ) -> RequestRecord:  # fmt: skip
        rec = make_record(rid, start, [(start + ttft, 4)], start + ttft + 0.1,
                          error_kind=error_kind, warmup=warmup)  # fmt: skip
        rec.session, rec.turn = session, number
        return rec

    records = [
        turn("a0", 0, 0, 0.0, 0.4), turn("a1", 0, 1, 1.0, 0.1), turn("a2", 0, 2, 2.0, 0.3),
        turn("b0", 1, 0, 0.0, 0.2), turn("b1", 1, 1, 0.5, 0.2, error_kind="http"),
        turn("w0", 2, 0, 0.0, 0.2, warmup=True),
    ]  # fmt: skip
    figures = session_figures(records)
    assert figures is not None
    assert (figures["sessions"], figures["complete"]) == (2, 1)  # b's second turn failed
    assert figures["turns"]["max"] == 3.0 and figures["turns"]["min"] == 2.0
    assert figures["duration_s"]["max"] == pytest.approx(2.4)  # a: 0.0 to 2.0 + 0.3 + 0.1
    # a: later turns' mean TTFT 0.2 s over the first's 0.4; b has no successful later turn.
    assert figures["later_over_first_ttft"]["count"] == 1
    assert figures["later_over_first_ttft"]["mean"] == pytest.approx(0.5)
    assert session_figures([make_record("plain", 0.0, [(0.1, 1)])]) is None


SHAREGPT: list[dict[str, Any]] = [
    {"id": "a", "conversations": [
        {"from": "human", "value": "What is a prefix cache?"},
        {"from": "gpt", "value": "It keeps the attention state of tokens seen before, so a repeated prefix is not computed again."},
        {"from": "human", "value": "Does it help a chat?"},
        {"from": "gpt", "value": "Yes: each turn resends the history."},
        {"from": "human", "value": "By how much?"},
        {"from": "gpt", "value": "That depends on the history's length."},
    ]},
    {"id": "b", "conversations": [
        {"from": "human", "value": "Name three rivers."},
        {"from": "gpt", "value": "The Nile, the Amazon and the Danube."},
        {"from": "human", "value": "Which is longest?"},
        {"from": "gpt", "value": "The Nile, by most measures."},
    ]},
]  # fmt: skip


def test_sharegpt_prompts_carry_their_conversations() -> None:
    prompt = sharegpt_prompt(SHAREGPT[0])
    assert prompt is not None and prompt.text == "What is a prefix cache?"
    assert [q for q, _ in prompt.turns] == [
        "What is a prefix cache?",
        "Does it help a chat?",
        "By how much?",
    ]
    # A gpt turn missing ends the conversation at the question it leaves unanswered.
    cut = {"conversations": [*SHAREGPT[1]["conversations"][:3], {"from": "human", "value": "x"}]}
    assert sharegpt_prompt(cut).turns == (  # type: ignore[union-attr]
        ("Name three rivers.", "The Nile, the Amazon and the Danube."), ("Which is longest?", None),
    )  # fmt: skip
    single = {"conversations": SHAREGPT[1]["conversations"][:2]}
    assert sharegpt_prompt(single).turns == ()  # type: ignore[union-attr]


async def test_sessions_from_sharegpt_replay_each_conversation_with_its_recorded_replies(
    stub: StubServer, tmp_path: Path
) -> None:
    data = tmp_path / "sharegpt.json"
    data.write_text(json.dumps(SHAREGPT))
    out = tmp_path / "out.json"
    args = build_parser().parse_args(
        ["--base-url", stub.base_url, "--model", "m", "--api", "chat", "--concurrency", "1",
         "--requests-per-level", "5", "--dataset", str(data), "--dataset-format", "sharegpt",
         "--session-turns", "4", "--output", str(out), "--quiet"]
    )  # fmt: skip
    assert await cli.run(args, EventWriter(None), None) == cli.EXIT_OK
    bodies = stub.state.bodies
    # Two sessions, each as long as its conversation (3 and 2 turns), the level's 5 requests.
    assert len(bodies) == 5
    by_first: dict[str, list[dict[str, Any]]] = {}
    for body in bodies:
        by_first.setdefault(body["messages"][0]["content"], []).append(body)
    assert sorted(len(v) for v in by_first.values()) == [2, 3]
    for conversation in SHAREGPT:
        said = [t["value"] for t in conversation["conversations"]]
        turns = by_first[said[0]]
        for k, body in enumerate(turns):
            # The history carried: every question and recorded reply so far, then this question.
            assert [m["content"] for m in body["messages"]] == said[: 2 * k + 1]
            assert [m["role"] for m in body["messages"]] == ["user", "assistant"] * k + ["user"]
            # The recorded reply's length is the turn's output length.
            assert body["max_tokens"] == estimate_tokens(said[2 * k + 1])
    level = json.loads(out.read_text())["levels"][0]
    assert [(t["turn"], t["requests"]) for t in level["turns"]] == [(0, 2), (1, 2), (2, 1)]
    sessions = level["sessions"]
    assert (sessions["sessions"], sessions["complete"]) == (2, 2)
    assert (sessions["turns"]["min"], sessions["turns"]["max"]) == (2.0, 3.0)
