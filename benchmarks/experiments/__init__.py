"""A/B experiments: several server profiles swept one after the other, unattended, compared.

``services`` creates and cancels experiments and records what the runner sees; ``runner`` is
the ``experiment.run`` job (stop the previous server with a verified stop, start the next,
wait for ready, check outputs, sweep, record); ``comparison`` turns the sweeps into ratios,
crossover, saturation and a verdict (benchlib.stats); ``figures`` and ``report`` render it
(Plotly figures, CSV, a self-contained HTML file); ``equivalence`` sends the fixed greedy
prompts and compares the outputs; ``selectors`` holds the reads; ``views`` the pages.
"""

from __future__ import annotations
