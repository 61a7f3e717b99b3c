"""Settings: what an operator sets comes from the environment (docs/configuration.md lists it),
read by helpers that fail loudly on a bad value; internal tuning is plain constants."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import dj_database_url
from csp.constants import NONCE, NONE, SELF
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("FAILSIGHT_VAR_DIR", BASE_DIR / "var"))

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no)")


def env_int(name: str, default: int, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below its minimum {minimum}")
    return value


def env_float(name: str, default: float, low: float, high: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if not low < value < high:
        raise ImproperlyConfigured(f"{name}={value} is not between {low} and {high}")
    return value


def env_objectives(name: str) -> dict[str, float]:
    """`agent:NAME=0.995,source:NAME=0.98`: per-target objectives, each a share below 1."""
    found: dict[str, float] = {}
    for item in env_list(name, []):
        target, _, raw = item.rpartition("=")
        kind = target.partition(":")[0]
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if kind not in ("agent", "source") or not target.partition(":")[2] or not 0 < value < 1:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not agent:NAME=share or source:NAME=share (0 < share < 1)"
            )
        found[target] = value
    return found


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_networks(name: str) -> list[str]:
    """Comma-separated addresses or networks (`10.0.0.0/8`), each checked; empty by default."""
    values = env_list(name, [])
    for value in values:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {value!r} is not an address or network") from None
    return values


def env_pair(name: str) -> tuple[str, str] | None:
    """`HEADER,value` (e.g. `HTTP_X_FORWARDED_PROTO,https`), or None when unset."""
    values = env_list(name, [])
    if not values:
        return None
    if len(values) != 2:
        raise ImproperlyConfigured(f"{name} takes two comma-separated values: HEADER,value")
    return values[0], values[1]


DEBUG = env_bool("DEBUG", True)

_DEV_SECRET = "dev-only-insecure-secret-key-do-not-use-in-production"
SECRET_KEY = env_str("SECRET_KEY", _DEV_SECRET)
if not DEBUG and SECRET_KEY == _DEV_SECRET:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "template_partials",
    "csp",
    "axes",
    # Its Swagger UI page and files, served as our static files (/api/v1/docs).
    "ninja",
    "orchestrator",
    "insights",
    "dashboard",
    # An add-on the product never imports.
    "demo",
]

MIDDLEWARE = [
    # /healthz and /readyz: answered for any Host, before sessions and sign-in.
    "orchestrator.health.ProbeMiddleware",
    "orchestrator.api.middleware.ApiHostMiddleware",
    "orchestrator.api.policies.PolicyVersionMiddleware",
    "orchestrator.api.middleware.MethodNotAllowedMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "dashboard.unavailable.DatabaseUnavailableMiddleware",
    "orchestrator.api.middleware.RequestBodyMiddleware",
    # The pages' middleware, each the library's own run for pages only: API operations skip them
    # (dashboard.middleware).
    "dashboard.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "dashboard.middleware.CsrfViewMiddleware",
    "dashboard.middleware.AuthenticationMiddleware",
    "dashboard.middleware.MessageMiddleware",
    "dashboard.middleware.XFrameOptionsMiddleware",
    "dashboard.middleware.HtmxMiddleware",
    "dashboard.middleware.CSPMiddleware",
    # Last, as django-axes asks.
    "dashboard.middleware.AxesMiddleware",
]
# axes and Django's security checks look for their middleware by its dotted name; each is there,
# as a subclass run for pages only, and dashboard.checks requires the CSRF and clickjacking ones.
SILENCED_SYSTEM_CHECKS = ["axes.W002", "security.W002", "security.W003"]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

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
                "csp.context_processors.nonce",
                "dashboard.context_processors.vocabulary",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
_db = dj_database_url.parse(DATABASE_URL)
if _db["ENGINE"] == "django.db.backends.postgresql":
    # JIT off: planned over the run partitions, short queries compiled longer than they ran.
    _db["OPTIONS"] = {"connect_timeout": 2, "options": "-c jit=off"}
    if env_bool("DATABASE_PREPARED_STATEMENTS", True):
        _db["OPTIONS"]["prepare_threshold"] = 5
    if env_bool("DATABASE_POOL", True):
        _db["OPTIONS"]["pool"] = {
            "min_size": 1,
            "max_size": env_int("DATABASE_POOL_MAX", 10, minimum=1),
            "timeout": 2,
            "reconnect_timeout": 5,
        }
        # Checks pooled connections itself, in place of CONN_HEALTH_CHECKS.
        _db["ENGINE"] = "config.postgresql"
    _db["CONN_MAX_AGE"] = 0  # the pool owns the connections
    _db["CONN_HEALTH_CHECKS"] = "pool" not in _db["OPTIONS"]
elif _db["ENGINE"] == "django.db.backends.sqlite3":
    _db["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CACHE_URL = env_str("CACHE_URL", "")
if CACHE_URL.startswith(("redis://", "rediss://")):
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads no cookie (the token rides on <body hx-headers>)
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SECURE_PROXY_SSL_HEADER = env_pair("SECURE_PROXY_SSL_HEADER")
TRUSTED_PROXIES = env_networks("TRUSTED_PROXIES")

AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = env_int("LOGIN_LOCKOUT_MINUTES", 15, minimum=1) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_CLIENT_IP_CALLABLE = "orchestrator.addresses.client_ip"
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, NONCE],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
        "base-uri": [NONE],
        "object-src": [NONE],
    }
}

API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 10 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES
API_MAX_BATCH = 1000
API_MAX_JSON_DEPTH = 32
API_RATE_LIMIT_PER_MINUTE = env_int("API_RATE_LIMIT_PER_MINUTE", 6000)
# A revocation elsewhere takes effect within API_TOKEN_CACHE_SECONDS.
API_TOKEN_CACHE_SECONDS = 5
POLICY_VERSION_CACHE_SECONDS = 1
INGEST_GROUP_MAX = 1000
# No METRICS_ALLOWED_IPS by default: behind a same-host proxy every visitor would look local.
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
METRICS_ALLOWED_IPS = env_networks("METRICS_ALLOWED_IPS")
# Agents and sources with series of their own on /metrics; the rest add up under "other".
METRICS_TOP_N = env_int("METRICS_TOP_N", 20, minimum=1)
# The currency the Costs page, its tiles and /metrics add up; runs in another one are counted apart.
COST_CURRENCY = env_str("COST_CURRENCY", "USD").strip().upper() or "USD"
# How long a process remembers the spend budgets and each one's spend today (decisions read them).
SPEND_BUDGET_CACHE_SECONDS = env_int("SPEND_BUDGET_CACHE_SECONDS", 10)


def env_trace_url(name: str) -> str:
    raw = env_str(name, "").strip()
    if raw and not (raw.startswith(("http://", "https://")) and "{trace_id}" in raw):
        raise ImproperlyConfigured(
            f"{name}={raw!r} must be an http(s) URL containing {{trace_id}} "
            "(and optionally {span_id})"
        )
    return raw


TRACE_URL_TEMPLATE = env_trace_url("TRACE_URL_TEMPLATE")
OTLP_JOIN_WAIT_SECONDS = env_int("OTLP_JOIN_WAIT_SECONDS", 30, minimum=1)
# An exporter's retry, a late parent: both come within minutes; the rows hold whole spans.
OTLP_JOIN_KEEP_SECONDS = 3600
OTLP_RELEASE_SECONDS = 5

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
# One message at a time per pool process (long tasks, acks_late); Redis overrides it below.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT = "config.broker:Transport"
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
        "control_folder": str(_broker_dir / "control"),
        "polling_interval": 0.05,
    }
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
elif CELERY_BROKER_URL.startswith(("amqp://", "amqps://", "pyamqp://")):
    # RabbitMQ (py-amqp), the recommended broker: an unacknowledged message comes back as soon as
    # its connection closes, and an ack is a frame on the consumer's own channel, so a lost one
    # ends with the connection and takes nothing else with it. Publisher confirms: a publish
    # returns once the broker has the message (the outbox deletes its row only then).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"confirm_publish": True, "connect_timeout": 2}
    CELERY_BROKER_HEARTBEAT = 10
else:
    # Redis. Long delays live in the database, never in broker countdowns; the outbox keeps a
    # message a silent broker was not sent. The visibility timeout is Redis's alone.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600, minimum=10),
        "socket_connect_timeout": 2,
        # A broker gone without closing the connection (failover, NAT) fails a command instead
        # of hanging it, and the consumer's BRPOP connection is checked.
        "socket_timeout": 30,
        "socket_keepalive": True,
        "health_check_interval": 10,
    }
    # kombu's Redis transport counts a message against the prefetch limit until its ack
    # reaches Redis; an ack refused during an outage ("Couldn't ack") stays counted forever,
    # and a channel whose limit is used up that way never asks for a message again (the worker
    # lives on, consuming nothing). Celery's own count of the tasks it holds bounds the worker
    # instead: it takes a message only when a pool process is free, and kombu sets no limit.
    CELERY_WORKER_DISABLE_PREFETCH = True
    CELERY_WORKER_PREFETCH_MULTIPLIER = 0
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Nothing uses `celery inspect`/`control`, and a Redis outage seen first on that pub/sub
# connection made the worker exit instead of reconnecting.
# (On only to stop a worker's consumer by hand: `celery control cancel_consumer`.)
CELERY_WORKER_ENABLE_REMOTE_CONTROL = env_bool("CELERY_WORKER_REMOTE_CONTROL", False)
# Seconds messages may wait while a worker receives none before it counts as not consuming
# (orchestrator.liveness); a worker whose every process runs a task counts as receiving.
WORKER_MAX_WAIT_SECONDS = env_int("WORKER_MAX_WAIT_SECONDS", 30, minimum=5)
# A task running when the broker drops finishes (tasks are idempotent, runs hold a lease).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Celery's persistent scheduler, recording its ticks for the System page.
CELERY_BEAT_SCHEDULER = "orchestrator.beat:Scheduler"
BEAT_TICK_RECORD_SECONDS = 5
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "celery")
CELERY_SWEEP_SECONDS = 1
RUN_LEASE_SECONDS = env_int("RUN_LEASE_SECONDS", 60, minimum=3)
RUN_MAX_DELIVERIES = 3
LOST_DISPATCH_SECONDS = RUN_LEASE_SECONDS
NUDGE_SECONDS = RUN_LEASE_SECONDS
# Seconds an agent's run reported `running` may stay so before the sweeper finishes it as a
# timeout (a token's own `running_timeout` overrides it), and a resolution may wait for its agent
# to pick it up before the pages say the agent may be gone.
RUN_RUNNING_TIMEOUT = env_int("RUN_RUNNING_TIMEOUT", 15 * 60, minimum=1)
RESOLUTION_PICKUP_TIMEOUT = env_int("RESOLUTION_PICKUP_TIMEOUT", 10 * 60, minimum=1)
OUTBOX_RESEND_SECONDS = 5
WEBHOOK_TIMEOUT_SECONDS = env_int("WEBHOOK_TIMEOUT_SECONDS", 5, minimum=1)
WEBHOOK_MAX_ATTEMPTS = 8
WEBHOOK_BACKOFF_SECONDS = 2
WEBHOOK_BACKOFF_MAX_SECONDS = 600
CELERY_BEAT_SCHEDULE: dict = {
    "sweep-due-runs": {
        "task": "orchestrator.tasks.sweep",
        "schedule": float(CELERY_SWEEP_SECONDS),
        "options": {"expires": 10},
    },
    "review-fallbacks": {
        "task": "orchestrator.tasks.apply_review_fallbacks",
        "schedule": 30.0,
        "options": {"expires": 60},
    },
    # Owner groups reminded of unclaimed review items, and items moved up their chain.
    "review-owner-reminders": {
        "task": "orchestrator.tasks.remind_review_owners",
        "schedule": 60.0,
        "options": {"expires": 60},
    },
    "switch-efficacy": {
        "task": "orchestrator.tasks.refresh_switch_efficacy",
        "schedule": 150.0,
        "options": {"expires": 150},
    },
    "otlp-release-held-spans": {
        "task": "orchestrator.tasks.release_held_spans",
        "schedule": float(OTLP_RELEASE_SECONDS),
        "options": {"expires": 2 * OTLP_RELEASE_SECONDS},
    },
}
# Runs' status changes after they are created: rollups refold the last hours.
DASHBOARD_GROUPS_SECONDS = 60
DASHBOARD_ROLLUP_LOOKBACK_HOURS = 3
CELERY_BEAT_SCHEDULE |= {
    "insights-refresh-rollups": {"task": "insights.tasks.refresh_rollups", "schedule": 60.0},
    "insights-fold-failure-groups": {
        "task": "insights.tasks.fold_failure_groups",
        "schedule": float(DASHBOARD_GROUPS_SECONDS),
        "options": {"expires": 2 * DASHBOARD_GROUPS_SECONDS},
    },
    "insights-evaluate-alerts": {"task": "insights.tasks.evaluate_alerts", "schedule": 60.0},
    # The Costs page's reports, computed ahead of the pages (each window when its copy is stale).
    "insights-warm-costs": {
        "task": "insights.tasks.warm_costs",
        "schedule": 60.0,
        "options": {"expires": 60},
    },
    "insights-fold-observations": {
        "task": "insights.tasks.fold_observations",
        "schedule": 60.0,
        "options": {"expires": 60},
    },
}
# Readers add the deltas not folded yet: this bounds their size, not the counts' freshness.
COUNTS_FOLD_SECONDS = 5
CELERY_BEAT_SCHEDULE |= {
    "insights-fold-minutes": {
        "task": "insights.tasks.fold_minutes",
        "schedule": float(COUNTS_FOLD_SECONDS),
        "options": {"expires": 2 * COUNTS_FOLD_SECONDS},
    },
    "orchestrator-fold-workflow-counters": {
        "task": "orchestrator.tasks.fold_workflow_counters",
        "schedule": float(COUNTS_FOLD_SECONDS),
        "options": {"expires": 2 * COUNTS_FOLD_SECONDS},
    },
}
RUNS_RETENTION_DAYS = env_int("RUNS_RETENTION_DAYS", 30)
ROLLUP_RETENTION_DAYS = env_int("ROLLUP_RETENTION_DAYS", 400)
_RUNS_KEPT = RUNS_RETENTION_DAYS or float("inf")
if ROLLUP_RETENTION_DAYS and ROLLUP_RETENTION_DAYS < _RUNS_KEPT:
    raise ImproperlyConfigured(
        f"ROLLUP_RETENTION_DAYS={ROLLUP_RETENTION_DAYS} would drop rollups before the runs they "
        f"count (RUNS_RETENTION_DAYS={RUNS_RETENTION_DAYS}); keep rollups at least as long"
    )
# A query not bounded by created_at plans and locks every partition: few, of a week each.
RUN_PARTITION_DAYS = 7
RUN_PARTITIONS_AHEAD = 2
RUN_SEARCH_FILL_SECONDS = 5
RUN_SEARCH_OVERLAP_SECONDS = 10
# Above this many expected matches a search walks the runs newest first (docs/run-indexes.md).
RUN_SEARCH_WALK_ABOVE = 2000
CELERY_BEAT_SCHEDULE |= {
    "run-partitions-ahead": {
        "task": "orchestrator.tasks.create_run_partitions",
        "schedule": 3600.0,
        "options": {"expires": 3600},
    },
    "run-search-fill": {
        "task": "orchestrator.tasks.fill_run_search",
        "schedule": float(RUN_SEARCH_FILL_SECONDS),
        "options": {"expires": 2 * RUN_SEARCH_FILL_SECONDS},
    },
    "retention": {
        "task": "insights.tasks.apply_retention",
        "schedule": 6 * 3600.0,
        "options": {"expires": 3600},
    },
}
DASHBOARD_POLL_SECONDS = 10
SWITCH_EFFICACY_ORDERING = True
SWITCH_EFFICACY_MIN_SWITCHES = 20
SWITCH_EFFICACY_DAYS = 28
RETRY_AUDIT_MIN_RETRIES = 3
SLO_OBJECTIVE = env_float("SLO_OBJECTIVE", 0.99, 0.0, 1.0)
SLO_OBJECTIVES = env_objectives("SLO_OBJECTIVES")
SLO_WINDOW_DAYS = env_int("SLO_WINDOW_DAYS", 28, minimum=1)
FAILSIGHT_SOURCE_MODULES = env_list("FAILSIGHT_SOURCE_MODULES", [])
VAR_DIR.mkdir(parents=True, exist_ok=True)
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns on a missing folder

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # "No hostname was supplied": the filesystem broker's URL always looks like that.
        "kombu.connection": {"level": "ERROR"},
        # "Connected to redis://…" at each listen for the workers' heartbeats (the System page).
        "kombu.mixins": {"level": "WARNING"},
    },
}
