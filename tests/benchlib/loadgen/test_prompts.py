from __future__ import annotations

import json

import pytest

from benchlib.loadgen.prompts import SyntheticPrompts, load_dataset, load_jsonl, load_sharegpt


def test_synthetic_prompts_are_deterministic_per_seed_and_index():
    a, b = SyntheticPrompts(50, seed=1), SyntheticPrompts(50, seed=1)
    assert a.get(3) == b.get(3)
    assert a.get(3) != a.get(4)
    assert a.get(3) != SyntheticPrompts(50, seed=2).get(3)
    assert len(a.get(3).text.split()) == 50
    assert a.get(3).max_tokens is None


def test_jsonl_prompts_keep_their_output_length(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(
        json.dumps({"prompt": "hello", "max_tokens": 12}) + "\n\n" + json.dumps({"prompt": "x"})
    )
    prompts = load_jsonl(path, seed=0)
    got = sorted((prompts.get(i).text, prompts.get(i).max_tokens or 0) for i in range(2))
    assert got == [("hello", 12), ("x", 0)]
    assert prompts.get(0) == prompts.get(2)  # wraps around


def test_bad_jsonl_line_is_reported_with_its_line_number(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"text": "no prompt key"}\n')
    with pytest.raises(ValueError, match=":1:"):
        load_jsonl(path)


def test_sharegpt_uses_first_human_turn_and_the_reply_length(tmp_path):
    data = [
        {"conversations": [{"from": "human", "value": "Q1"}, {"from": "gpt", "value": "a" * 40}]},
        {"conversations": [{"from": "gpt", "value": "hi"}, {"from": "human", "value": "Q2"}]},
        {"conversations": []},
    ]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    prompts = load_sharegpt(path)
    got = sorted((p.text, p.max_tokens) for p in prompts.prompts)
    assert got == [("Q1", 10), ("Q2", None)]
    assert load_dataset(path, "sharegpt").prompts == prompts.prompts
