"""Statistics of A/B comparisons of concurrency sweeps (plain Python, no Django).

One module per concern (``types``: the curves, samples and ratios they pass around;
``intervals``, ``crossover``, ``saturation``, ``verdict``, ``schedule``, ``engines``, ...);
callers import each name from its module, and this package re-exports nothing."""
