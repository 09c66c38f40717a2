from __future__ import annotations

import json

import pytest

from benchlib.stats.speculative_schedule import vllm_schedule, vllm_speculative_config


def test_schedule_drafts_up_to_n_and_none_above():
    assert vllm_schedule(2, 3) == [[1, 2, 3], [3, 3, 0]]
    with pytest.raises(ValueError):
        vllm_schedule(0, 3)


def test_the_candidates_config_keeps_its_method_and_gains_the_switch():
    spec = {"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 3}
    argv = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--speculative-config",
            json.dumps(spec)]  # fmt: skip
    out = vllm_speculative_config(argv, 4)
    assert out is not None
    assert json.loads(out) == {
        **spec,
        "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 5, 0]],
    }
    assert vllm_speculative_config(["vllm", "--model", "m"], 4) is None
    assert vllm_speculative_config([f"--speculative-config={json.dumps(spec)}"], 1) is not None
