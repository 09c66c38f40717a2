"""Four finished sweeps whose profiles have long names (one of them a single unbroken token,
as a model path is), three of them speculative with accept figures, for the comparison page's
legend layout (``build`` prints their ids)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.sweeps.models import SweepLevel
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
        sweep = make_sweep(profile, values, tmp=folder, seed=i)
        if profile.speculative:
            # Both server figures and two prompt categories: four accept-chart entries an arm,
            # twelve long ones in a half-width card (a legend Plotly would otherwise scroll).
            for level in SweepLevel.objects.filter(sweep=sweep):
                level.server_metrics = {
                    "accept_length": 2.5 + 0.1 * i, "accept_length_source": "counters",
                    "tokens_per_step": 2.4 + 0.1 * i, "tokens_per_step_source": "itl_counters",
                }  # fmt: skip
                level.summary = {"acceptance": {"by_category": {
                    "chat": {"requests": 20, "accept_length": 2.7, "acceptance_rate": 0.5},
                    "code": {"requests": 20, "accept_length": 3.6, "acceptance_rate": 0.7},
                }}}  # fmt: skip
                level.save(update_fields=["server_metrics", "summary"])
        ids.append(sweep.pk)
    return " ".join(str(pk) for pk in ids)
