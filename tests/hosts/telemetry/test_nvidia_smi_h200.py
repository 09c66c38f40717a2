"""The parsers and the agent's probe on nvidia-smi output recorded on a real H200 (data/h200/,
see its README): the formats come from the driver, not from our simulator's imitation."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from hosts.telemetry.nvidia_smi import (
    GpuStreamAssembler,
    parse_compute_apps,
    parse_gpu_list,
    parse_gpu_query,
)
from tests.hosts.agent.helpers import run_agent

DATA = Path(__file__).parent / "data" / "h200"
UUID = "GPU-02a3d752-0f91-e8c9-3e92-7b6250f33fc9"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_the_telemetry_query_reads_every_field_of_the_idle_h200() -> None:
    result = parse_gpu_query(read("query.csv"))
    (gpu,) = result.gpus
    assert result.skipped_lines == ()
    assert (gpu.index, gpu.uuid, gpu.name) == (0, UUID, "NVIDIA H200")
    assert (gpu.memory_total_mib, gpu.memory_used_mib, gpu.memory_free_mib) == (143771, 0, 143156)
    assert (gpu.utilization_pct, gpu.power_w, gpu.temperature_c) == (0.0, 78.55, 37.0)


def test_the_same_query_with_its_header_and_units_gives_the_same_sample() -> None:
    with_header = parse_gpu_query(read("query_header_units.csv"))
    assert with_header.header is not None and with_header.header[0] == "index"
    assert with_header.gpus == parse_gpu_query(read("query.csv")).gpus


def test_the_lms_stream_of_one_gpu_is_one_complete_tick_a_line() -> None:
    assembler = GpuStreamAssembler(expected_gpus=1)
    ticks = assembler.feed(read("lms_stream.csv")) + assembler.close()
    assert len(ticks) == 8 and all(t.complete and len(t.gpus) == 1 for t in ticks)
    assert [t.seq for t in ticks] == sorted({t.seq for t in ticks})
    assert {t.gpus[0].power_w for t in ticks} <= {78.56, 78.57, 78.6, 78.61}


def test_compute_apps_lists_each_holder_with_its_memory_and_nothing_when_idle() -> None:
    apps = parse_compute_apps(read("compute_apps_two_holders.csv"))
    assert [(a.gpu_uuid, a.pid, a.used_memory_mib) for a in apps] == [
        (UUID, 725, 4706),
        (UUID, 1069, 4706),
    ]
    assert parse_compute_apps(read("compute_apps_idle.csv")) == []


def test_the_gpu_listing_names_the_uuid_the_query_reports() -> None:
    (listed,) = parse_gpu_list(read("nvidia_smi_L.txt"))
    assert (listed.index, listed.name, listed.uuid) == (0, "NVIDIA H200", UUID)


def test_the_agents_probe_reads_driver_cuda_and_gpus_from_the_recorded_output(
    tmp_path: Path,
) -> None:
    # A stand-in that replays the recordings for the two calls the probe makes.
    fake = tmp_path / "nvidia-smi"
    plain, listing = (
        shlex.quote(str(DATA / "nvidia_smi.txt")),
        shlex.quote(str(DATA / "nvidia_smi_L.txt")),
    )
    fake.write_text(f'#!/bin/sh\nif [ "$1" = -L ]; then cat {listing}; else cat {plain}; fi\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    smi = run_agent("probe", {}, env=env).result["nvidia_smi"]
    assert smi["available"] is True and smi["error"] is None
    assert smi["gpus"] == [f"GPU 0: NVIDIA H200 (UUID: {UUID})"]
    assert (smi["driver_version"], smi["cuda_version"]) == ("580.159.04", "13.0")
