from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchlib.simulator.gpu import GPU_NAME, Holding, load_inventory, split_memory

from .conftest import SMI, gpu_used, smi, wait_until

ROOT = Path(__file__).resolve().parents[3]
FIELDS = "index,uuid,name,memory.total,memory.used,memory.free,utilization.gpu,power.draw,temperature.gpu"


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDASH_SIM_GPU_COUNT", "2")
    monkeypatch.setenv("SPECDASH_SIM_GPU_TOTAL_MB", "1000")
    state_dir = tmp_path / "state"
    load_inventory(str(state_dir))
    return state_dir


def test_query_gpu_csv_noheader_nounits_in_the_order_asked(state):
    holding = Holding(str(state), {1: 300}, "worker0")
    holding.utilization = {1: 90}
    holding.write()
    try:
        out = smi(state, f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits")
    finally:
        holding.release()
    assert out.returncode == 0, out.stderr
    rows = [line.split(", ") for line in out.stdout.splitlines()]
    assert [r[0] for r in rows] == ["0", "1"]
    assert rows[0][1].startswith("GPU-") and rows[0][2] == GPU_NAME
    assert rows[0][3:7] == ["1000", "0", "1000", "0"]
    assert rows[1][3:7] == ["1000", "300", "700", "90"]
    float(rows[1][7]), int(rows[1][8])
    reordered = smi(state, "--query-gpu=memory.total,index", "--format=csv,noheader,nounits")
    assert reordered.stdout.splitlines() == ["1000, 0", "1000, 1"]


def test_query_gpu_csv_with_header_and_units(state):
    out = smi(state, "--query-gpu=index,memory.used,utilization.gpu,power.draw", "--format=csv")
    lines = out.stdout.splitlines()
    assert lines[0] == "index, memory.used [MiB], utilization.gpu [%], power.draw [W]"
    assert lines[1].startswith("0, 0 MiB, 0 %, ") and lines[1].endswith(" W")


def test_list_gpus_matches_the_inventory(state):
    inventory = load_inventory(str(state))
    out = smi(state, "-L")
    assert out.stdout.splitlines() == [
        f"GPU {g.index}: {GPU_NAME} (UUID: {g.uuid})" for g in inventory
    ]


# A holder in a process of its own, started as the Python interpreter: its process name (what
# nvidia-smi shows) is known whatever runs the test (pytest-xdist retitles its workers).
HOLDER = (
    "import sys; from benchlib.simulator.gpu import Holding; "
    "Holding(sys.argv[1], {0: 100, 1: 200}, 'worker0'); print('held', flush=True); sys.stdin.read()"
)


def test_compute_apps_list_live_holders_and_skip_dead_ones(state):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    ledger = state / "ledger"
    # A dead pid and a reused pid (right pid, wrong start time) must not show.
    (ledger / "999999999.json").write_text(
        json.dumps({"pid": 999999999, "start_time": 1, "memory_mib": {"0": 5}})
    )
    (ledger / "1.json").write_text(json.dumps({"pid": 1, "start_time": -5, "memory_mib": {"0": 7}}))
    try:
        out = smi(
            state,
            "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
            "--format=csv,noheader,nounits",
        )
        used = smi(state, "--query-gpu=memory.used", "--format=csv,noheader,nounits")
    finally:
        holder.kill()  # its ledger entry stays behind, as a crashed holder's would
        holder.communicate()
    uuids = {g.index: g.uuid for g in load_inventory(str(state))}
    rows = [line.split(", ") for line in out.stdout.splitlines()]
    assert [(r[0], r[1], r[3]) for r in rows] == [
        (uuids[0], str(holder.pid), "100"),
        (uuids[1], str(holder.pid), "200"),
    ]
    assert rows[0][2] == rows[1][2] == sys.executable
    assert used.stdout.splitlines() == ["100", "200"]
    assert smi(
        state, "--query-gpu=memory.used", "--format=csv,noheader,nounits"
    ).stdout.split() == ["0", "0"]


def test_holders_keep_a_device_file_open(state):
    holding = Holding(str(state), {1: 10}, "main")
    try:
        targets = []
        for fd in os.listdir(f"/proc/{os.getpid()}/fd"):
            try:
                targets.append(os.readlink(f"/proc/{os.getpid()}/fd/{fd}"))
            except FileNotFoundError:  # the listing's own descriptor
                continue
        assert str(state / "dev" / "nvidia1") in targets
    finally:
        holding.release()


def test_loop_ms_streams_repeated_sets(state):
    env = {**os.environ, "SPECDASH_SIM_STATE_DIR": str(state)}
    proc = subprocess.Popen(
        [str(SMI), "--query-gpu=index,memory.used", "--format=csv,noheader,nounits", "-lms", "100"],
        env=env,
        cwd="/",
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        lines = [proc.stdout.readline() for _ in range(8)]
    finally:
        proc.kill()
        proc.wait()
    assert [line.split(",")[0] for line in lines] == ["0", "1"] * 4


def test_unknown_field_is_refused(state):
    bad = smi(state, "--query-gpu=index,bogus", "--format=csv")
    assert bad.returncode == 2
    assert "bogus" in bad.stderr


def test_memory_split_places_workers_on_their_gpus():
    assert split_memory((0, 1), 2, 100) == [{0: 100}, {1: 100}]
    assert split_memory((0, 1), 0, 100) == [{0: 100, 1: 100}]
    assert split_memory((0,), 2, 100) == [{0: 50}, {0: 50}]
    assert split_memory((0, 1, 2, 3), 2, 100) == [{0: 100, 2: 100}, {1: 100, 3: 100}]


def test_inventory_is_created_once(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDASH_SIM_GPU_COUNT", "3")
    first = load_inventory(str(tmp_path))
    monkeypatch.setenv("SPECDASH_SIM_GPU_COUNT", "5")
    assert load_inventory(str(tmp_path)) == first
    assert [g.total_mib for g in first] == [97887] * 3
    assert sorted(os.listdir(tmp_path / "dev")) == ["nvidia0", "nvidia1", "nvidia2"]


def test_memory_rises_at_start_and_falls_at_exit(sims, monkeypatch):
    monkeypatch.setenv("SPECDASH_SIM_GPU_COUNT", "4")
    load_inventory(str(sims.state_dir))
    assert gpu_used(sims.state_dir) == {0: 0, 1: 0, 2: 0, 3: 0}
    sim = sims.start("--workers", "0", "--gpus", "3")
    assert gpu_used(sims.state_dir)[3] == 40 * 1024
    sim.proc.terminate()
    assert sim.proc.wait(10) == 0
    assert wait_until(lambda: gpu_used(sims.state_dir)[3] == 0, 5)
