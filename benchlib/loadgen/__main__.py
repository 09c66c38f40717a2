from __future__ import annotations

from benchlib.loadgen.cli import main

# Guarded: spawned worker processes re-import this module under the name "__mp_main__".
if __name__ == "__main__":
    raise SystemExit(main())
