"""The project's core: the job queue (``jobs/``), roles, API tokens, and the realtime layer
(channel groups, event payloads, the viewer consumer base). It knows no app: ``hosts`` and
``benchmarks`` build on it and register their job handlers in their ``AppConfig.ready()``."""
