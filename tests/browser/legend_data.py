"""Four finished sweeps whose profiles have long names (one of them a single unbroken token,
as a model path is), for the comparison page's legend layout (``build`` prints their ids)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hosts.models import Engine, ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep

LONG_NAMES = (
    "Llama-3.1-70B-Instruct on SGLang 0.4.6 with EAGLE-3 speculative decoding, 5 steps",
    "Llama-3.1-70B-Instruct on SGLang 0.4.6 baseline without speculation, gpu-box-07",
    "meta-llama/Llama-3.1-8B-Instruct__sglang-0.4.6__eagle3__num-steps-5__topk-8__draft-16",
    "short",
)


def build() -> str:
    host = ServerProfile.objects.get(name="Simulated SGLang EAGLE-3").host
    folder = Path(tempfile.mkdtemp(prefix="specdash-legend-"))
    ids = []
    for i, name in enumerate(LONG_NAMES):
        profile, _ = ServerProfile.objects.get_or_create(
            name=name,
            defaults={"engine": Engine.SIMULATOR, "host": host, "port": 39000 + i,
                      "launch_argv": ["python3", "-m", "benchlib.simulator"],
                      "speculative": i != 1},
        )  # fmt: skip
        values = {c: 100.0 * (1 + 0.1 * i) * c**0.8 for c in (1, 2, 4, 8)}
        ids.append(make_sweep(profile, values, tmp=folder, seed=i).pk)
    return " ".join(str(pk) for pk in ids)
