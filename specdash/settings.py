"""Django settings for specdash.

Every deploy-specific value comes from a ``SPECDASH_*`` environment variable with a safe
development default, so ``make run`` works on a fresh clone and production is configured
without editing code. See docs/operations.md for the full list.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path
from typing import NotRequired, TypedDict

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("SPECDASH_VAR_DIR", BASE_DIR / "var"))


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _env_float(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None


def _env_seconds(name: str, default: float) -> float:
    value = _env_float(name, default)
    assert value is not None
    return value


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number") from None


def _secret_key() -> str:
    # A key from the environment wins; otherwise one is generated once into a local file
    # (ignored by git) so sessions survive restarts without a committed secret.
    from_env = os.environ.get("SPECDASH_SECRET_KEY")
    if from_env:
        return from_env
    key_file = Path(os.environ.get("SPECDASH_SECRET_KEY_FILE", BASE_DIR / ".secret_key"))
    if key_file.exists():
        return key_file.read_text().strip()
    key = secrets.token_urlsafe(50)
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.write_text(key)
    key_file.chmod(0o600)
    return key


SECRET_KEY = _secret_key()
DEBUG = _env_bool("SPECDASH_DEBUG")
ALLOWED_HOSTS = _env_list("SPECDASH_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = _env_list("SPECDASH_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "template_partials",
    "axes",
    "core",
    "hosts",
    "benchmarks",
    # The project's own commands (serve, the API client CLI): they wire the apps together.
    "specdash",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before anything reads the body: 413 over DATA_UPLOAD_MAX_MEMORY_SIZE (specdash/limits.py).
    "specdash.limits.RequestLimitsMiddleware",
    "specdash.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

# Content-Security-Policy of every response (why each part: specdash/csp.py); an empty
# SPECDASH_CSP sends none (for a proxy that sets its own).
_CSP = [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "font-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
]
SPECDASH_CSP = os.environ.get("SPECDASH_CSP", "; ".join(_CSP))

ROOT_URLCONF = "specdash.urls"
ASGI_APPLICATION = "specdash.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "core.context_processors.job_worker",
            ],
        },
    },
]

DATABASES: dict[str, dj_database_url.DBConfig] = {
    "default": dj_database_url.parse(
        os.environ.get("SPECDASH_DATABASE_URL", f"sqlite:///{VAR_DIR / 'specdash.sqlite3'}"),
        conn_max_age=int(os.environ.get("SPECDASH_DB_CONN_MAX_AGE", "0")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # A file, not :memory:, so tests can share it between threads and with subprocesses
    # (a job worker, a Daphne server) exactly as the real processes do.
    DATABASES["default"]["TEST"] = {
        # One per test process: concurrent runs must not share (and delete) one file.
        "NAME": os.environ.get(
            "SPECDASH_TEST_DB", str(VAR_DIR / f"test-specdash-{os.getpid()}.sqlite3")
        )
    }
    # The web server, the job worker and the load generator's reporter write concurrently:
    # WAL plus a busy timeout turns "database is locked" into a short wait.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )


class RedisHost(TypedDict):
    address: str
    socket_timeout: float | None


class RedisLayerConfig(TypedDict):
    hosts: list[RedisHost]


class ChannelLayer(TypedDict):
    """One entry of ``CHANNEL_LAYERS`` as Channels reads it: the backend's import path and the
    keyword arguments it is built with."""

    BACKEND: str
    CONFIG: NotRequired[RedisLayerConfig]


def redis_channel_layer(url: str) -> ChannelLayer:
    """The channels-redis layer on ``url``.

    No socket timeout: a consumer waits for its next event in a BZPOPMIN that Redis answers
    after 5 s when nothing came, and redis-py (>= 8) reads with a 5 s timeout by default, so
    every idle stretch of 5 s raised TimeoutError in the consumer, which Daphne turns into a
    websocket close 1011. A Redis that died is still noticed: by a reset connection, or by
    TCP keepalive, which redis-py turns on."""
    return {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{"address": url, "socket_timeout": None}]},
    }


_redis_url = os.environ.get("SPECDASH_REDIS_URL")
CHANNEL_LAYERS: dict[str, ChannelLayer] = {
    "default": redis_channel_layer(_redis_url)
    if _redis_url
    else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Login throttling (django-axes, see specdash/throttle.py): after SPECDASH_LOGIN_FAILURE_LIMIT
# wrong passwords for one username from one address, that pair waits the cool-off.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = _env_bool("SPECDASH_LOGIN_THROTTLE", True)
AXES_FAILURE_LIMIT = int(os.environ.get("SPECDASH_LOGIN_FAILURE_LIMIT", "10"))
AXES_COOLOFF_TIME = timedelta(seconds=int(os.environ.get("SPECDASH_LOGIN_COOLOFF_S", "900")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_CLIENT_IP_CALLABLE = "specdash.throttle.client_ip"
AXES_LOCKOUT_TEMPLATE = "registration/locked.html"
AXES_VERBOSE = False
SPECDASH_TRUSTED_PROXIES = int(os.environ.get("SPECDASH_TRUSTED_PROXIES", "0"))

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.environ.get("SPECDASH_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("SPECDASH_STATIC_ROOT", VAR_DIR / "staticfiles"))
# Daphne serves /static/ itself (specdash/asgi.py) unless this is off (behind nginx).
SPECDASH_SERVE_STATIC = _env_bool("SPECDASH_SERVE_STATIC", True)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Per-instance run directories (logs, exit codes) on the machine that runs a server. The
# far-side agent replaces {uid} with the remote user's uid (one root per user) and refuses a
# root another user owns or can write to, or a symlink: a shared /tmp cannot be taken over.
SPECDASH_RUN_ROOT = os.environ.get("SPECDASH_RUN_ROOT", "/tmp/specdash-runs-{uid}")  # noqa: S108
# Sweeps against a base URL (a server specdash did not start) may target only these
# prefixes when set (comma-separated, e.g. "http://10.0.0.5:8000,https://llm.internal/v1");
# empty allows any http(s) URL, fine for one team, not for a shared deployment.
SPECDASH_SWEEP_BASE_URLS = _env_list("SPECDASH_SWEEP_BASE_URLS", "")
# The default TERM-to-KILL grace of a new server profile (each profile has its own).
SPECDASH_STOP_GRACE_S = int(os.environ.get("SPECDASH_STOP_GRACE_S", "10"))
# Where sweep records and other bulky artefacts are kept on the dashboard machine.
SPECDASH_DATA_DIR = Path(os.environ.get("SPECDASH_DATA_DIR", VAR_DIR / "data"))
# The trace files a sweep may replay (LoadSettings.trace names one of them): the operator puts
# them here; nothing is fetched.
SPECDASH_TRACE_DIR = Path(os.environ.get("SPECDASH_TRACE_DIR", SPECDASH_DATA_DIR / "traces"))
# The largest trace file an upload may store (bytes); Mooncake's published traces are 2-10 MB.
SPECDASH_TRACE_MAX_BYTES = _env_int("SPECDASH_TRACE_MAX_BYTES", 64 * 1024 * 1024)

# Job workers (core/jobs/worker.py ``WorkerSettings``), every worker of a deployment, the one
# ``serve`` embeds included; ``manage.py jobworker`` flags override them per process.
SPECDASH_JOB_LEASE_S = _env_seconds("SPECDASH_JOB_LEASE_S", 30.0)
# None: 5 s, or a third of a lease shorter than 15 s (at most half the lease in any case).
SPECDASH_JOB_HEARTBEAT_S = _env_float("SPECDASH_JOB_HEARTBEAT_S", None)
SPECDASH_JOB_MAX_JOBS = _env_int("SPECDASH_JOB_MAX_JOBS", 32)
SPECDASH_JOB_POLL_S = _env_seconds("SPECDASH_JOB_POLL_S", 0.5)
SPECDASH_JOB_KINDS = _env_list("SPECDASH_JOB_KINDS", "")  # empty: every kind
SPECDASH_JOB_TAGS = _env_list("SPECDASH_JOB_TAGS", "")
SPECDASH_JOB_MACHINE = os.environ.get("SPECDASH_JOB_MACHINE", "").strip()  # empty: host name
# A worker's loop that fails (its database refuses writes or is gone) retries after this
# back-off, doubling from the first value up to the second (core/jobs/worker.py).
SPECDASH_JOB_RETRY_S = _env_seconds("SPECDASH_JOB_RETRY_S", 0.5)
SPECDASH_JOB_RETRY_MAX_S = _env_seconds("SPECDASH_JOB_RETRY_MAX_S", 15.0)
# New work (a server start, a sweep, an experiment) is refused while no healthy job worker has
# beaten within a lease (core/jobs/health.py). Off only for tests that run jobs by hand.
SPECDASH_WORKER_REQUIRED = _env_bool("SPECDASH_WORKER_REQUIRED", True)

# Sweep levels split across load-generator processes (benchmarks/sweeps/distributed.py) and
# run as jobs on other machines (benchmarks/sweeps/shards.py). 0 streams: never split.
SPECDASH_LOADGEN_MAX_STREAMS = max(0, _env_int("SPECDASH_LOADGEN_MAX_STREAMS", 0))
SPECDASH_LOADGEN_SHARD_JOBS = _env_bool("SPECDASH_LOADGEN_SHARD_JOBS")
SPECDASH_LOADGEN_SHARD_TAGS = _env_list("SPECDASH_LOADGEN_SHARD_TAGS", "")
SPECDASH_LOADGEN_SHARD_SPREAD = _env_bool("SPECDASH_LOADGEN_SHARD_SPREAD")
SPECDASH_LOADGEN_GANG_TIMEOUT_S = _env_seconds("SPECDASH_LOADGEN_GANG_TIMEOUT_S", 60.0)

# The format a new sweep's request records are written in (docs/operations.md, "Records and
# retention"): "compact" (records.sdrec, about a ninth of the bytes, read into columns without
# building a row per request; records.jsonl downloads are made from it while they are sent)
# or "jsonl" (records.jsonl, one JSON object a line). A sweep keeps the format it started
# with across resumes, and every reader takes either.
SPECDASH_RECORDS_FORMAT = os.environ.get("SPECDASH_RECORDS_FORMAT", "compact")
if SPECDASH_RECORDS_FORMAT not in {"jsonl", "compact"}:
    raise ImproperlyConfigured("SPECDASH_RECORDS_FORMAT must be jsonl or compact")
# Retention of finished work's rows (benchmarks/sweeps/retention.py, docs/operations.md "Records and
# retention"), applied by the job worker every SPECDASH_RETENTION_INTERVAL_S (0: never; the
# `retention` management command applies it by hand).
SPECDASH_RETENTION_INTERVAL_S = _env_seconds("SPECDASH_RETENTION_INTERVAL_S", 3600.0)
SPECDASH_RETAIN_JOB_EVENTS_DAYS = max(1, _env_int("SPECDASH_RETAIN_JOB_EVENTS_DAYS", 14))
SPECDASH_RETAIN_SHARD_RECORDS_S = _env_seconds("SPECDASH_RETAIN_SHARD_RECORDS_S", 3600.0)
SPECDASH_RETAIN_SAMPLES_DAYS = max(1, _env_int("SPECDASH_RETAIN_SAMPLES_DAYS", 30))
SPECDASH_RETAIN_SAMPLE_STEP_S = _env_seconds("SPECDASH_RETAIN_SAMPLE_STEP_S", 10.0)

# Server lifecycle polling (hosts/lifecycle/): readiness checks, status lines while starting,
# the watch of a ready server, and how long an unreachable host's instance waits before `lost`.
SPECDASH_READY_POLL_S = _env_seconds("SPECDASH_READY_POLL_S", 0.25)
SPECDASH_STATUS_INTERVAL_S = _env_seconds("SPECDASH_STATUS_INTERVAL_S", 1.0)
SPECDASH_WATCH_INTERVAL_S = _env_seconds("SPECDASH_WATCH_INTERVAL_S", 1.0)
SPECDASH_LOST_AFTER_S = _env_seconds("SPECDASH_LOST_AFTER_S", 120.0)

# Telemetry (hosts/telemetry/conf.py ``TelemetrySettings``, whose defaults these are).
SPECDASH_TELEMETRY_RETENTION_S = _env_seconds("SPECDASH_TELEMETRY_RETENTION_S", 7 * 86400.0)
SPECDASH_TELEMETRY_DOWNSAMPLE_AFTER_S = _env_seconds(
    "SPECDASH_TELEMETRY_DOWNSAMPLE_AFTER_S", 3600.0
)
SPECDASH_TELEMETRY_DOWNSAMPLE_STEP_S = _env_seconds("SPECDASH_TELEMETRY_DOWNSAMPLE_STEP_S", 10.0)
SPECDASH_TELEMETRY_GPU_INTERVAL_MS = _env_int("SPECDASH_TELEMETRY_GPU_INTERVAL_MS", 1000)
SPECDASH_TELEMETRY_HOST_INTERVAL_S = _env_seconds("SPECDASH_TELEMETRY_HOST_INTERVAL_S", 1.0)
SPECDASH_TELEMETRY_SCRAPE_S = _env_seconds("SPECDASH_TELEMETRY_SCRAPE_S", 1.0)
SPECDASH_TELEMETRY_LINGER_S = _env_seconds("SPECDASH_TELEMETRY_LINGER_S", 15.0)
SPECDASH_TELEMETRY_WATCH_TTL_S = _env_seconds("SPECDASH_TELEMETRY_WATCH_TTL_S", 60.0)
SPECDASH_TELEMETRY_HISTORY_S = _env_seconds("SPECDASH_TELEMETRY_HISTORY_S", 900.0)

# Production hardening, switched on with SPECDASH_SECURE=1 behind TLS.
if _env_bool("SPECDASH_SECURE"):
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = _env_bool("SPECDASH_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = int(os.environ.get("SPECDASH_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = _env_bool("SPECDASH_HSTS_PRELOAD")
    SECURE_CONTENT_TYPE_NOSNIFF = True

# dictConfig's schema (typeshed declares it privately): nested dicts of mixed values.
LOGGING: dict[str, object] = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("SPECDASH_LOG_LEVEL", "INFO")},
    "loggers": {
        "daphne": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
    },
}

STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "specdash.staticfinders.PlotlyFinder",
]
