"""The ``sweep.run`` job: drive the load generator as a subprocess and record what it reports.

``runner`` spawns ``python -m benchlib.loadgen`` and reads its event lines, ``events`` maps
each event to a recording service (samples batched about once a second), ``handler`` is the
job itself (cancel, server crash, load-generator death) and ``exports`` serves the results.
"""

from __future__ import annotations
