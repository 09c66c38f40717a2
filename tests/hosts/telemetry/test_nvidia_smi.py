from __future__ import annotations

from pathlib import Path

import pytest

from hosts.telemetry.nvidia_smi import (
    GPU_QUERY_FIELDS,
    GpuStreamAssembler,
    compute_apps_query_argv,
    gpu_list_argv,
    gpu_query_argv,
    parse_compute_apps,
    parse_gpu_line,
    parse_gpu_list,
    parse_gpu_query,
)

DATA = Path(__file__).parent / "data"
NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_query_argv_is_the_standard_one_shot_query():
    assert gpu_query_argv() == [
        "nvidia-smi",
        "--query-gpu=index,uuid,name,memory.total,memory.used,memory.free,"
        "utilization.gpu,power.draw,temperature.gpu",
        "--format=csv,noheader,nounits",
    ]


def test_query_argv_streams_with_lms():
    assert gpu_query_argv(500)[-2:] == ["-lms", "500"]
    with pytest.raises(ValueError):
        gpu_query_argv(0)


def test_other_argvs():
    assert compute_apps_query_argv()[1] == (
        "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"
    )
    assert gpu_list_argv() == ["nvidia-smi", "-L"]


def test_parses_eight_gpus_and_skips_the_truncated_last_line():
    result = parse_gpu_query(read("nvidia_smi_query.csv"))

    assert [gpu.index for gpu in result.gpus] == [0, 1, 2, 3, 4, 5, 6]
    assert len(result.skipped_lines) == 1
    assert result.skipped_lines[0].startswith("7, GPU-b4e91c03")
    first = result.gpus[0]
    assert first.uuid == "GPU-3f9c2a71-5e0b-8d44-a1c6-0b7e52d9f310"
    assert first.name == NAME
    assert first.memory_total_mib == 97887
    assert first.memory_used_mib == 81234
    assert first.memory_free_mib == 16003
    assert first.utilization_pct == 92.0
    assert first.power_w == pytest.approx(412.57)
    assert first.temperature_c == 67.0
    assert result.header is None


def test_not_available_and_not_supported_become_none():
    gpus = parse_gpu_query(read("nvidia_smi_query.csv")).gpus

    assert gpus[5].power_w is None  # [N/A]
    assert gpus[6].power_w is None  # [Not Supported]
    assert gpus[6].temperature_c == 70.0


def test_header_with_units_sets_the_order_and_units_are_stripped():
    result = parse_gpu_query(read("nvidia_smi_query_header_units.csv"))

    assert result.header == GPU_QUERY_FIELDS
    assert len(result.gpus) == 8
    assert result.skipped_lines == ()
    assert result.gpus[0].memory_total_mib == 97887
    assert result.gpus[0].memory_used_mib == 1
    assert result.gpus[0].utilization_pct == 0.0
    assert result.gpus[0].power_w == pytest.approx(33.5)
    assert result.gpus[3].memory_used_mib is None
    assert result.gpus[3].memory_free_mib is None


def test_arbitrary_field_order_and_extra_fields():
    fields = ("uuid", "temperature.gpu", "index", "timestamp", "power.draw", "memory.used")
    line = "GPU-abc ,  45 ,3,  2025/01/02 10:00:00.123 , [N/A],   1024  "

    gpu = parse_gpu_line(line, fields)

    assert gpu is not None
    assert (gpu.index, gpu.uuid, gpu.temperature_c, gpu.memory_used_mib) == (
        3,
        "GPU-abc",
        45.0,
        1024,
    )
    assert gpu.power_w is None
    assert gpu.name is None
    assert gpu.extra == {"timestamp": "2025/01/02 10:00:00.123"}


def test_empty_and_garbage_values_are_none_and_a_bad_index_skips_the_line():
    assert parse_gpu_line("0, , , , abc, [Unknown Error], , , ") == parse_gpu_line("0,,,,,,,,")
    gpu = parse_gpu_line("0, , , , abc, [Unknown Error], , , ")
    assert gpu is not None
    assert gpu.uuid is None
    assert gpu.memory_used_mib is None
    assert parse_gpu_line("[N/A], GPU-x, n, 1, 1, 1, 1, 1, 1") is None


def test_query_without_index_is_refused():
    with pytest.raises(ValueError, match="index"):
        parse_gpu_line("GPU-x, 1", ("uuid", "memory.used"))


def test_driver_error_message_is_skipped_not_raised():
    text = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    result = parse_gpu_query(text)
    assert result.gpus == ()
    assert len(result.skipped_lines) == 1


def test_stream_groups_lines_per_tick_and_handles_a_restart():
    assembler = GpuStreamAssembler()
    stream1 = read("nvidia_smi_lms_stream1.csv")

    sets = []
    # Feed in odd-sized chunks, as a pipe delivers them.
    for start in range(0, len(stream1), 77):
        sets += assembler.feed(stream1[start : start + 77])

    # The first tick is only known to be over when index 0 comes again; later ticks are
    # emitted as soon as their eighth GPU arrives.
    assert [(s.seq, len(s.gpus), s.complete) for s in sets] == [
        (0, 8, True),
        (1, 8, True),
        (2, 8, True),
    ]
    assert [gpu.memory_used_mib for gpu in sets[2].gpus] == [40200 + i for i in range(8)]

    # The process died mid-line and was started again.
    after_restart = assembler.restart()
    assert [(s.seq, len(s.gpus), s.complete, s.stream) for s in after_restart] == [(3, 3, False, 0)]
    assert assembler.dropped_partial_lines == 1

    sets = assembler.feed(read("nvidia_smi_lms_stream2.csv"))
    assert [(s.seq, len(s.gpus), s.complete, s.stream) for s in sets] == [
        (4, 8, True, 1),
        (5, 8, True, 1),
    ]
    assert sets[0].gpus[0].memory_used_mib == 41000
    assert assembler.skipped_lines == 0
    assert assembler.close() == []


def test_stream_restart_without_notice_loses_only_the_glued_line():
    assembler = GpuStreamAssembler()
    sets = assembler.feed(read("nvidia_smi_lms_stream1.csv"))
    sets += assembler.feed(read("nvidia_smi_lms_stream2.csv"))
    sets += assembler.close()

    # The old process's half line was glued onto the new stream's first line: one bad line,
    # the cut tick and the first new tick come out incomplete, nothing is mixed up.
    assert assembler.skipped_lines == 1
    assert [(len(s.gpus), s.complete) for s in sets] == [
        (8, True),
        (8, True),
        (8, True),
        (3, False),
        (7, False),
        (8, True),
    ]
    assert [gpu.index for gpu in sets[4].gpus] == [1, 2, 3, 4, 5, 6, 7]


def test_stream_with_header_lines_takes_a_new_header_as_a_restart():
    text = read("nvidia_smi_query_header_units.csv")
    assembler = GpuStreamAssembler(expected_gpus=8)

    first = assembler.feed(text)
    second = assembler.feed(text)

    assert [(s.stream, len(s.gpus), s.complete) for s in first] == [(0, 8, True)]
    assert [(s.stream, len(s.gpus), s.complete) for s in second] == [(1, 8, True)]
    assert first[0].gpus[7].power_w == pytest.approx(40.5)


def test_stream_with_expected_count_emits_the_first_tick_at_once():
    assembler = GpuStreamAssembler(expected_gpus=8)
    first_tick = "\n".join(read("nvidia_smi_lms_stream2.csv").splitlines()[:8]) + "\n"
    sets = assembler.feed(first_tick)
    assert [(s.seq, s.complete) for s in sets] == [(0, True)]


def test_compute_apps_with_missing_pids_and_commas_in_a_path():
    apps = parse_compute_apps(read("nvidia_smi_compute_apps.csv"))

    assert len(apps) == 5
    assert apps[0].gpu_uuid == "GPU-3f9c2a71-5e0b-8d44-a1c6-0b7e52d9f310"
    assert apps[0].pid == 2231045
    assert apps[0].process_name == "sglang::scheduler_DP0_TP0_EP0"
    assert apps[0].used_memory_mib == 80424
    assert (apps[2].pid, apps[2].process_name) == (None, None)
    assert apps[3].process_name == "/opt/venvs/sglang,0.5/bin/python3"
    assert apps[4].used_memory_mib is None


def test_compute_apps_header_and_no_processes():
    text = (
        "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        "GPU-3f9c2a71-5e0b-8d44-a1c6-0b7e52d9f310, 77, python3, 512 MiB\n"
    )
    apps = parse_compute_apps(text)
    assert [(a.pid, a.used_memory_mib) for a in apps] == [(77, 512)]
    assert parse_compute_apps("") == []


def test_gpu_list_with_mig_devices():
    gpus = parse_gpu_list(read("nvidia_smi_L.txt"))
    assert [gpu.index for gpu in gpus] == list(range(8))
    assert gpus[7].name == NAME
    assert gpus[7].uuid == "GPU-b4e91c03-6f5d-2e87-a3b0-f1c6d5e29a48"

    mig = parse_gpu_list(
        "GPU 0: NVIDIA H200 (UUID: GPU-5d3c1f9a-0000-1111-2222-333344445555)\n"
        "  MIG 3g.71gb     Device  0: (UUID: MIG-11111111-2222-3333-4444-555555555555)\n"
        "  MIG 3g.71gb     Device  1: (UUID: MIG-66666666-7777-8888-9999-000000000000)\n"
        "GPU 1: NVIDIA H200 (UUID: GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee)\n"
    )
    assert [len(gpu.mig_devices) for gpu in mig] == [2, 0]
    assert mig[0].mig_devices[1].device == 1
    assert mig[0].mig_devices[1].profile == "3g.71gb"
