from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib, pkgutil, sys
import benchmarks.loadgen as pkg
names = [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
names = [n for n in names if not n.endswith("__main__")]
for name in names:
    importlib.import_module(name)
importlib.import_module("benchmarks.perf.bench_loadgen")
bad = sorted(m for m in sys.modules if m == "django" or m.startswith("django."))
assert not bad, bad
print(len(names))
"""


def test_loadgen_modules_import_without_django():
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 12
