from __future__ import annotations

import socket
from typing import Any

import pytest

from benchlib.loadgen import datasets
from benchlib.loadgen.apis import Api
from benchlib.loadgen.datasets import builtin_prompts, humaneval_prompts, sharegpt_prompts
from benchlib.loadgen.level import run_level
from benchlib.loadgen.level_config import LevelConfig
from tests.benchlib.loadgen.stub_server import StubServer


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a socket fails the test: the sets come from installed packages."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a prompt set tried to use the network")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    datasets.sharegpt_prompts.cache_clear()
    datasets.humaneval_prompts.cache_clear()


def test_sharegpt_loads_from_the_installed_package_offline(no_network: None) -> None:
    prompts = sharegpt_prompts()
    assert len(prompts) > 3000  # of the first SHAREGPT_LIMIT conversations, the usable ones
    assert {p.category for p in prompts} == {"chat"}
    # The file's first conversation, first human turn (its reply gives the output length).
    assert prompts[0].text.startswith("Summarize the main ideas of Jeff Walker's Product Launch")
    assert prompts[0].max_tokens is not None and prompts[0].max_tokens > 50


def test_humaneval_loads_all_164_problems_offline(no_network: None) -> None:
    prompts = humaneval_prompts()
    assert len(prompts) == 164
    assert {p.category for p in prompts} == {"code"}
    assert "def has_close_elements(" in prompts[0].text
    assert all('"""' in p.text or "'''" in p.text for p in prompts)


def test_mixed_set_alternates_chat_and_code() -> None:
    mixed = builtin_prompts("mixed", seed=3)
    cats = [mixed.get(i).category for i in range(200)]
    assert cats == ["chat", "code"] * 100


def test_synthetic_prompts_are_tagged_synthetic() -> None:
    assert builtin_prompts("synthetic", input_tokens=8).get(5).category == "synthetic"


def test_sets_are_deterministic_per_seed_and_differ_between_seeds() -> None:
    a = [builtin_prompts("humaneval", seed=1).get(i) for i in range(20)]
    b = [builtin_prompts("humaneval", seed=1).get(i) for i in range(20)]
    c = [builtin_prompts("humaneval", seed=2).get(i) for i in range(20)]
    assert a == b
    assert a != c


def test_unknown_set_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown prompt set"):
        builtin_prompts("mtbench")


def test_a_missing_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(datasets.DatasetUnavailable, match="not installed"):
        datasets._package_file("no_such_dataset_package_xyz", "data", "x.json")


async def test_two_arms_send_the_same_prompts_in_the_same_order(stub: StubServer) -> None:
    # Two arms of an experiment run the same load settings against two servers: each server
    # must see the same prompts, in the same order, with the same categories.
    cfg = LevelConfig(
        api=Api.COMPLETIONS,
        base_url=stub.base_url,
        model="stub",
        concurrency=1,
        num_requests=12,
        warmup_requests=2,
        max_tokens=4,
        seed=7,
    )
    first = await run_level(cfg, builtin_prompts("mixed", seed=7))
    sent_first = list(stub.state.bodies)
    async with StubServer() as other:
        second = await run_level(
            LevelConfig(**{**_fields(cfg), "base_url": other.base_url}),
            builtin_prompts("mixed", seed=7),
        )
        sent_second = list(other.state.bodies)
    assert len(sent_first) == 14
    assert [b["prompt"] for b in sent_first] == [b["prompt"] for b in sent_second]
    cats = [r.category for r in first.records]
    assert cats == [r.category for r in second.records]
    assert set(cats) == {"chat", "code"}


def _fields(cfg: LevelConfig) -> dict[str, Any]:
    return {name: getattr(cfg, name) for name in cfg.__dataclass_fields__}
