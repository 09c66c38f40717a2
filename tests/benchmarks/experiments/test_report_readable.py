"""The HTML report in the dashboard's look, carrying the speculation schedule with each
engine's configuration and what was run as readable rows (the launch one flag a line, the
environment and what the engine reported as name/value rows, never a dict's repr); legends
under the x axis's title."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from django.test import Client

from benchmarks.charts import legend_rows
from benchmarks.experiments.figures import comparison_figures
from benchmarks.sweeps.models import Sweep
from benchmarks.templatetags.readable import argv_lines, name_value_rows
from hosts.models import ServerProfile
from tests.benchmarks.experiments.test_schedule import _three_arms

pytestmark = pytest.mark.django_db


def test_the_launch_reads_one_flag_a_line() -> None:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--enable-x",
            "--speculative-config", '{"a": 1}']  # fmt: skip
    assert argv_lines(argv) == [
        "python3 -m sglang.launch_server", "--model-path m", "--enable-x",
        '--speculative-config {"a": 1}',
    ]  # fmt: skip
    assert argv_lines(["llama-server", "-m", "x.gguf", "--port", "1"]) == [
        "llama-server -m x.gguf", "--port 1",
    ]  # fmt: skip


def test_nested_reports_become_dotted_rows() -> None:
    info = {"version": "0.5.9", "server_args": {"tp_size": 2, "dtype": "auto"}, "gpus": [0, 1]}
    assert name_value_rows(info) == [
        ("gpus", "[0, 1]"), ("server_args.dtype", "auto"), ("server_args.tp_size", "2"),
        ("version", "0.5.9"),
    ]  # fmt: skip


def test_the_report_has_the_schedule_configs_and_readable_launches_in_the_apps_look(
    make_profile: Callable[..., ServerProfile], tmp_path: Path, client: Client, viewer: object
) -> None:
    experiment = _three_arms(make_profile, tmp_path, 3)
    sweep = Sweep.objects.filter(experiment_step__experiment_id=experiment.pk).first()  # type: ignore[attr-defined]
    assert sweep is not None
    sweep.environment["instance"]["env"] = {"CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": "hf_x"}
    sweep.environment["instance"]["server_info"] = {"version": "0.11.0", "args": {"tp": 1}}
    sweep.save()
    client.force_login(viewer)  # type: ignore[arg-type]
    html = client.get(f"/experiments/{experiment.pk}/report.html").content.decode()  # type: ignore[attr-defined]
    # The schedule, its chart rendered in place, and each engine's configuration to paste.
    assert 'data-testid="schedule-section"' in html and 'id="chart-schedule"' in html
    assert html.count('id="chart-schedule"') == 1
    assert 'data-testid="schedule-config"' in html and 'data-testid="schedule-config-value"' in html
    assert "num_speculative_tokens_per_batch_size" in html
    assert 'data-testid="verify-form"' not in html  # no form in a file
    # The dashboard's white plot area, not Python Plotly's default grey.
    assert '"plot_bgcolor":"#ffffff"' in html and "#E5ECF6" not in html
    # What was run: the launch flag by flag, the environment (secrets masked) and the
    # engine's report as rows.
    assert "<div><code>--speculative-config" in html
    assert "<th><code>CUDA_VISIBLE_DEVICES</code></th><td><code>0</code></td>" in html
    assert "<th><code>HF_TOKEN</code></th><td><code>***</code></td>" in html
    assert "<th><code>args.tp</code></th><td><code>1</code></td>" in html
    what_was_run = html.split('data-testid="what-was-run"', 1)[1].split("</section>", 1)[0]
    assert "{&#x27;" not in what_was_run and "{'" not in what_was_run  # no dict repr


def test_every_comparison_legend_sits_under_the_axis_title_with_room_for_its_rows(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    from benchmarks.experiments.comparison import comparison_build
    from benchmarks.experiments.series import experiment_series

    experiment = _three_arms(make_profile, tmp_path, 3)
    comparison = comparison_build(series=experiment_series(experiment=experiment))  # type: ignore[arg-type]
    for name, figure in comparison_figures(comparison).items():
        legend = figure["layout"]["legend"]
        assert (legend["yref"], legend["y"], legend["yanchor"]) == ("container", 0, "bottom")
        names = [t["name"] for t in figure["data"] if t.get("name")]
        rows = legend_rows(names)
        layout = figure["layout"]
        assert layout["margin"]["b"] >= 56 + 20 * rows, name
        # The chart grows with its legend: the plot keeps its height.
        assert layout["height"] - layout["margin"]["t"] - layout["margin"]["b"] == 240, name
    assert legend_rows(["a" * 60] * 4) == 4  # one long entry a row at a half-width card
