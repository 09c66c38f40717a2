from __future__ import annotations

import subprocess
import sys


def test_telemetry_imports_nothing_from_django():
    # A fresh interpreter: the test process itself has Django loaded by pytest-django.
    code = (
        "import sys\n"
        "import hosts.telemetry.deltas, hosts.telemetry.hostload, hosts.telemetry.nvidia_smi\n"
        "bad = sorted(name for name in sys.modules if name.split('.')[0] == 'django')\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
