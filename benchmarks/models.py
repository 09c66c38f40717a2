"""Django loads an app's models from ``benchmarks.models``: each slice's model module is
imported here so that its models register. Nothing is re-exported: import each model from its
slice (``benchmarks.sweeps.models``, ``benchmarks.experiments.models``)."""

from __future__ import annotations

# Imported for the registration their class statements do; both bind only the name
# ``benchmarks`` here, which is all the linter sees of them.
import benchmarks.experiments.models
import benchmarks.sweeps.models  # noqa: F401
