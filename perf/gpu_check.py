"""What specdash reads from a GPU host, checked on a real GPU (no Django, no simulator).

    python -m perf.gpu_check --out DIR [--llama-server BIN | --build-llama-cuda] [--hold-gib 4]

Run on a machine with an NVIDIA GPU; the GPU-holding processes need PyTorch (``--torch-python``
names an interpreter that has it, if the one running this has not). It checks,
against the driver itself rather than against our simulator's ledger:

1. **nvidia-smi as it is.** The plain header, ``-L``, the telemetry query, the compute-apps
   query and a short ``-lms`` stream are recorded raw and parsed by the same parsers the
   dashboard uses (``hosts.telemetry.nvidia_smi``); the agent's ``probe`` and ``preflight``
   read the same GPU. The raw text goes into the report, so a recorded run can become a test
   fixture (tests/hosts/telemetry/data/).
2. **The stop the README promises, with real GPU memory.** The agent launches a server that
   starts a worker in a session of its own (as engines' workers do), both holding GPU memory.
   While they run, ``verify`` must call the instance dirty and name both as holders of GPU 0;
   after the agent's ``stop`` (marker-based: the worker is outside the server's group and
   session), ``verify`` must say stopped, with the GPU's used memory back at its baseline.
3. **A real engine on the GPU** (with ``--llama-server``, a CUDA build): llama-server with the
   project's tiny speculative model pair offloaded to the GPU, launched and stopped by the agent,
   swept by the load generator. Every token the client counted is one the server's counter says
   it generated; at C=1 the client's inter-token latency (mean, over deliveries) equals the
   server's own decode time per token.

Prints one line per check and writes ``report.json`` (every reading, raw outputs included) to
``--out``. Exit status 1 when any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from engines.llamacpp import llamacpp_argv
from engines.models import write_pair
from hosts.agent import AGENT_SOURCE, agent_argv, parse_agent_output
from hosts.telemetry import nvidia_smi
from hosts.telemetry.prometheus import parse_samples
from perf.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
GPU = 0
# A GPU's used memory moves by a few MiB with nothing of ours on it (the driver, other
# contexts); the agent's own default tolerance for "back at the baseline".
TOLERANCE_MIB = 512
MAX_TOKENS = 64

HOLDER = '''\
"""A server that starts a worker in a session of its own; both hold GPU memory."""
import subprocess, sys, time
import torch
role, gib = sys.argv[1], int(sys.argv[2])
if role == "server":
    subprocess.Popen([sys.executable, __file__, "worker", str(gib)], start_new_session=True)
held = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
held.fill_(1)
torch.cuda.synchronize()
print(role, "holds", gib, "GiB", flush=True)
time.sleep(3600)
'''


class Report:
    def __init__(self, out: Path, work: Path) -> None:
        self.out = out  # report.json only
        self.work = work  # models, run directories, scripts
        self.data: dict[str, Any] = {"checks": []}
        self.failed = 0

    def check(self, name: str, passed: bool, detail: Any = "") -> bool:
        self.data["checks"].append({"name": name, "passed": passed, "detail": detail})
        self.failed += not passed
        print(f"{'PASS' if passed else 'FAIL'}  {name}  {detail}", flush=True)
        return passed

    def save(self) -> None:
        (self.out / "report.json").write_text(json.dumps(self.data, indent=1, default=str))


def run_text(argv: list[str], timeout: float = 30) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return done.stdout + (f"\n[stderr] {done.stderr}" if done.stderr.strip() else "")


def agent(command: str, args: dict[str, Any]) -> dict[str, Any]:
    """The agent run as every transport runs it: ``python3 - <command> <json>``, source on stdin."""
    done = subprocess.run(
        agent_argv(command, args, python=sys.executable),
        input=AGENT_SOURCE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return parse_agent_output(done.stdout, done.stderr)


def used_mib() -> int:
    result = nvidia_smi.parse_gpu_query(run_text(nvidia_smi.gpu_query_argv()))
    sample = next(g for g in result.gpus if g.index == GPU)
    assert sample.memory_used_mib is not None
    return sample.memory_used_mib


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.25)
    print(f"  (gave up waiting for {what} after {timeout:.0f} s)", flush=True)
    return False


@dataclass
class LaunchedRun:
    """A server the agent launched, verified and stopped with the arguments the lifecycle uses."""

    run_id: str
    run_dir: Path
    launch: dict[str, Any]
    baseline_mib: int  # GPU 0's used memory before the launch
    port: int | None = None

    @property
    def ids(self) -> dict[str, Any]:
        return {k: self.launch[k] for k in ("pid", "pgid", "sid", "start_time")}

    def verify(self) -> dict[str, Any]:
        baseline = {str(GPU): self.baseline_mib}
        args = {"run_id": self.run_id, "gpus": [GPU], "baseline_gpu_mem_mb": baseline, **self.ids}
        return agent("verify", {**args, **({"port": self.port} if self.port else {})})

    def stop(self) -> dict[str, Any]:
        supervisor = self.launch["supervisor_pid"]
        return agent("stop", {"run_id": self.run_id, "run_dir": str(self.run_dir),
                              "supervisor_pid": supervisor, **self.ids})  # fmt: skip


def launch_run(
    report: Report, name: str, argv: list[str], port: int | None = None
) -> LaunchedRun | None:
    run_dir = report.work / "runs" / name
    baseline = used_mib()
    run_id = f"gpu-check-{name}"
    args = {"run_id": run_id, "run_dir": str(run_dir), "argv": argv,
            "workdir": str(report.work), **({"port": port} if port else {})}  # fmt: skip
    launch = agent("launch", args)
    report.data[f"{name}_launch"] = launch
    if not report.check(f"the agent launches {argv[0]}", launch["ok"], launch):
        return None
    return LaunchedRun(run_id, run_dir, launch, baseline, port)


def record_nvidia_smi(report: Report) -> None:
    raw = {
        "plain": run_text(["nvidia-smi"]),
        "list": run_text(nvidia_smi.gpu_list_argv()),
        "query": run_text(nvidia_smi.gpu_query_argv()),
        "query_header": run_text([*nvidia_smi.gpu_query_argv()[:-1], "--format=csv"]),
        "compute_apps": run_text(nvidia_smi.compute_apps_query_argv()),
    }
    stream = subprocess.Popen(
        [*nvidia_smi.gpu_query_argv(), "-lms", "200"], stdout=subprocess.PIPE, text=True
    )
    time.sleep(1.5)
    stream.send_signal(signal.SIGINT)
    raw["stream"] = stream.communicate(timeout=10)[0]
    report.data["nvidia_smi"] = raw
    query = nvidia_smi.parse_gpu_query(raw["query"])
    listed = nvidia_smi.parse_gpu_list(raw["list"])
    report.check(
        "nvidia-smi query parses: one row per listed GPU, no rejected lines",
        len(query.gpus) == len(listed) > 0 and not query.skipped_lines,
        [(g.index, g.name, g.memory_used_mib, g.memory_total_mib, g.power_w) for g in query.gpus],
    )
    with_header = nvidia_smi.parse_gpu_query(raw["query_header"])
    report.check(
        "the same query with its header line parses to the same GPUs",
        [g.uuid for g in with_header.gpus] == [g.uuid for g in query.gpus],
    )
    sets: list[nvidia_smi.GpuSampleSet] = []
    assembler = nvidia_smi.GpuStreamAssembler(expected_gpus=len(query.gpus))
    sets += assembler.feed(raw["stream"])
    sets += assembler.close()
    report.check(
        "the -lms stream groups into whole ticks",
        len(sets) >= 3 and all(s.complete for s in sets),
        f"{len(sets)} ticks",
    )
    probe = agent("probe", {})
    report.data["agent_probe"] = probe
    report.check(
        "the agent's probe reads the GPUs and the driver",
        probe["ok"] and len(probe["nvidia_smi"]["gpus"]) == len(listed),
        probe["nvidia_smi"],
    )


def holder_lifecycle(report: Report, hold_gib: int, python: str) -> None:
    script = report.work / "holder.py"
    script.write_text(HOLDER)
    preflight = agent("preflight", {"gpus": [GPU]})
    report.data["holder_preflight"] = preflight
    report.check("preflight on an idle GPU passes", preflight["ok"], preflight["problems"])
    run = launch_run(report, "holder", [python, str(script), "server", str(hold_gib)])
    if run is None:
        return
    expected = run.baseline_mib + 2 * hold_gib * 1024
    report.check(
        "server and worker both hold their memory (nvidia-smi)",
        wait_for("GPU memory", lambda: used_mib() >= expected, 90),
        f"baseline {run.baseline_mib} MiB, now {used_mib()} MiB",
    )
    report.data["holder_compute_apps"] = run_text(nvidia_smi.compute_apps_query_argv())
    running = report.data["holder_verify_running"] = run.verify()
    counted = sorted(h["pid"] for h in running["holders"] if h["counts"] and GPU in h["gpus"])
    members = sorted(m["pid"] for m in running["members"])
    report.check(
        "while it runs: dirty, and both processes hold GPU 0 (from /proc fds)",
        running["verdict"] == "dirty" and len(counted) == 2 and set(counted) <= set(members),
        {"holders": counted, "members": members},
    )
    server = run.launch["pid"]
    worker = [m for m in running["members"] if m["pid"] != server and m["role"] == "process"]
    report.check(
        "the worker in its own session is found by the marker alone",
        any(m["found_by"] == ["marker"] for m in worker),
        worker,
    )
    stop = report.data["holder_stop"] = run.stop()
    report.check("the stop ends both", stop["clean"] and not stop["survivors"], stop)
    back = wait_for("GPU memory back", lambda: used_mib() <= run.baseline_mib + TOLERANCE_MIB, 30)
    stopped = report.data["holder_verify_stopped"] = run.verify()
    report.check(
        "after the stop: verified stopped, GPU memory at its baseline",
        back and stopped["verdict"] == "stopped" and stopped["gpu_memory"][str(GPU)]["ok"] is True,
        stopped["gpu_memory"],
    )


def sweep(
    base_url: str, out: Path, concurrency: str, *, requests: int
) -> subprocess.CompletedProcess[str]:
    """The load generator as a sweep runs it: greedy, 64 tokens, results JSON to `out`."""
    argv = [sys.executable, "-m", "benchlib.loadgen", "--base-url", base_url, "--concurrency",
            concurrency, "--requests-per-level", str(requests), "--max-tokens", str(MAX_TOKENS),
            "--input-tokens", "6", "--temperature", "0", "--output", str(out),
            "--quiet"]  # fmt: skip
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)


def metrics(base_url: str) -> dict[str, float]:
    samples = parse_samples(httpx.get(base_url + "/metrics", timeout=10).text)
    return {
        name: sum(by_labels.values())
        for name, by_labels in samples.items()
        if name.startswith("llamacpp:")
    }


def llama_server_on_gpu(report: Report, binary: Path) -> None:
    pair = write_pair(report.work / "models", agreement=2 / 3)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    argv = llamacpp_argv(
        str(binary),
        str(pair.target),
        port=port,
        draft=str(pair.draft),
        draft_n_max=3,
        slots=16,
        context=16 * 512,
    )
    argv += ["-ngl", "99", "-ngld", "99"]  # every layer of both models on the GPU
    run = launch_run(report, "llama", argv, port)
    if run is None:
        return
    baseline = run.baseline_mib
    run_dir = run.run_dir

    def healthy() -> bool:
        try:
            return httpx.get(base_url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        if not report.check("llama-server is healthy", wait_for("health", healthy, 120)):
            return
        on_gpu = used_mib() - baseline
        log = (
            (run_dir / "server.log").read_text(errors="replace")
            if (run_dir / "server.log").exists()
            else ""
        )
        report.check("its memory is on the GPU (nvidia-smi)", on_gpu > 100, f"+{on_gpu} MiB")
        report.data["llama_log_cuda_lines"] = [
            ln for ln in log.splitlines() if "CUDA" in ln or "offload" in ln
        ][:40]
        before = metrics(base_url)
        done = sweep(base_url, report.work / "sweep.json", "1,4,16", requests=48)
        after = metrics(base_url)
        if not report.check("the sweep ran", done.returncode == 0, done.stderr[-2000:]):
            return
        levels = json.loads((report.work / "sweep.json").read_text())["levels"]
        report.data["sweep_levels"] = levels
        served = (
            after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
        )
        counted = sum(lv["output_tokens"] for lv in levels)
        report.check(
            "every token counted is one the server generated (all levels)",
            counted == served == 3 * 48 * MAX_TOKENS,
            f"client {counted}, server {served}",
        )
        for lv in levels:
            print(
                f"  C={lv['concurrency']}: {lv['output_tok_s']:.0f} tok/s, TTFT p50 "
                f"{lv['ttft_ms']['p50']:.2f} ms, ITL p50 {lv['itl_ms']['p50']:.3f} ms, "
                f"{lv['mean_tokens_per_delivery']:.2f} tokens/delivery",
                flush=True,
            )
        # C=1 alone: one request at a time, so the server's decode seconds are one stream's.
        c1 = _c1_server_ms_per_token(base_url, report.work / "c1.json")
        report.data["c1_recheck"] = c1
        report.check(
            "C=1: client ITL mean equals the server's decode time per token (5%)",
            abs(c1["client_itl_mean_ms"] / c1["server_ms_per_token"] - 1) < 0.05,
            c1,
        )
    finally:
        report.data["llama_stop"] = run.stop()
        wait_for("GPU memory back", lambda: used_mib() <= baseline + TOLERANCE_MIB, 30)
        stopped = report.data["llama_verify_stopped"] = run.verify()
        report.check(
            "llama-server stopped: verified, port free, GPU memory at its baseline",
            stopped["verdict"] == "stopped",
            stopped["reasons"],
        )


def _c1_server_ms_per_token(base_url: str, out: Path) -> dict[str, float]:
    before = metrics(base_url)
    sweep(base_url, out, "1", requests=24).check_returncode()
    after = metrics(base_url)
    (level,) = json.loads(out.read_text())["levels"]
    tokens = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    seconds = (
        after["llamacpp:tokens_predicted_seconds_total"]
        - before["llamacpp:tokens_predicted_seconds_total"]
    )
    return {
        "server_ms_per_token": seconds * 1e3 / tokens,
        "client_itl_mean_ms": level["itl_ms"]["mean"],
        "client_itl_p50_ms": level["itl_ms"]["p50"],
        "tokens": tokens,
    }


def build_llama_cuda(work: Path) -> subprocess.Popen[str]:
    """`make engines`' build script with CUDA, started beside the first checks (minutes)."""
    log = (work / "build.log").open("w")
    return subprocess.Popen(
        ["bash", str(ROOT / "engines" / "build_llama_server.sh")],
        env={**os.environ, "SPECDASH_LLAMA_CUDA": "1"},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )


def finish_build(
    report: Report, build: subprocess.Popen[str], started: float, timeout: float
) -> Path | None:
    try:
        out, _ = build.communicate(timeout=max(1.0, timeout - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        build.kill()
        out, _ = build.communicate()
    log = (report.work / "build.log").read_text(errors="replace")
    built = build.returncode == 0
    detail = f"{time.monotonic() - started:.0f} s" if built else log[-3000:]
    report.data["llama_build"] = {"returncode": build.returncode, "log_tail": log[-3000:]}
    report.check("the CUDA llama-server builds (engines/build_llama_server.sh)", built, detail)
    return Path(out.strip().splitlines()[-1]) if built else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--llama-server", type=Path, default=None, help="a CUDA build")
    which.add_argument(
        "--build-llama-cuda",
        action="store_true",
        help="build it (SPECDASH_LLAMA_CUDA=1) while the other checks run",
    )
    parser.add_argument("--build-timeout", type=float, default=900.0, help="seconds, from start")
    parser.add_argument("--work", type=Path, default=None, help="scratch (default: a temp dir)")
    parser.add_argument("--hold-gib", type=int, default=4)
    parser.add_argument("--torch-python", default=sys.executable, help="a Python with PyTorch")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    report = Report(args.out, work)
    started = time.monotonic()
    build = build_llama_cuda(work) if args.build_llama_cuda else None
    try:
        record_nvidia_smi(report)
        holder_lifecycle(report, args.hold_gib, args.torch_python)
        binary = (
            finish_build(report, build, started, args.build_timeout) if build else args.llama_server
        )
        if binary is not None:
            llama_server_on_gpu(report, binary)
    finally:
        if build is not None and build.poll() is None:
            build.kill()
        report.save()
    print(f"{len(report.data['checks']) - report.failed} passed, {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
