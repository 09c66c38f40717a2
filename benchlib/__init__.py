"""The measurement library: the load generator, the inference simulator, the statistics.

Plain Python with no Django (tests/specdash/test_import_contract.py holds it to that). Each
part runs as its own process (``python -m benchlib.loadgen``, ``python -m benchlib.simulator``)
and as a library imported by the ``benchmarks`` app, the perf scripts and the tests.
"""
