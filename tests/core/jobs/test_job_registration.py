"""Job handlers register from their own apps' ``AppConfig.ready()`` (the registry imports none
of them: tests/specdash/test_import_contract.py), so a process that starts Django (a worker,
the web server) has them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# A fresh interpreter: in this one, other tests have imported the handler modules already.
# Nothing but Django's own start-up: no handler module is imported by hand.
SCRIPT = """
import json, django
django.setup()
from core.jobs import registry
print(json.dumps({
    kind: [
        registry.handler_for(kind) is not None,
        registry.interrupt_hook_for(kind) is not None,
        registry.forced_cancel_hook_for(kind) is not None,
    ]
    for kind in %r
}))
"""

KINDS = [
    "server.run",
    "server.stop",
    "server.kill_holders",
    "telemetry.host",
    "sweep.run",
    "sweep.shard",
    "experiment.run",
]
# The kinds that have their own interrupt and forced-cancel hooks.
HOOKED = {"server.run", "sweep.run", "experiment.run"}


def test_every_job_kind_is_registered_by_its_app_when_django_starts() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "specdash.settings"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT % (KINDS,)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    registered = json.loads(out.stdout.strip().splitlines()[-1])
    assert registered == {kind: [True, kind in HOOKED, kind in HOOKED] for kind in KINDS}
