"""One settings file. What an operator sets (deployment, capacity, security, retention,
integrations) comes from the environment through the small helpers below, which fail loudly on a
bad value; docs/configuration.md lists every variable. The defaults make a fresh clone run with no
server at all (SQLite and kombu's filesystem broker). Internal tuning is plain constants."""

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
    """A number between `low` and `high` (both excluded), loudly refused otherwise."""
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
    # Sign-in throttling and lockout (AXES_* below); lockouts are also audited.
    "axes",
    "orchestrator",
    "insights",
    "dashboard",
    # The main job (`manage.py launch`) and its demonstration: an add-on the product never imports.
    "demo",
]

MIDDLEWARE = [
    # An API request for a host not in ALLOWED_HOSTS gets the JSON envelope, not Django's page.
    "orchestrator.api.errors.ApiHostMiddleware",
    # The API's answers: X-Policy-Version on each, and ninja's 405 in the JSON envelope.
    "orchestrator.api.policies.PolicyVersionMiddleware",
    "orchestrator.api.errors.MethodNotAllowedMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # A page whose database is down answers 503 with Retry-After (the API: its envelope).
    "dashboard.unavailable.DatabaseUnavailableMiddleware",
    # An API body is read whole (within API_MAX_BODY_BYTES) or refused: 400, 411 or 413.
    "orchestrator.api.errors.RequestBodyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it answers a locked-out sign-in.
    "axes.middleware.AxesMiddleware",
]

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

# --- Database ---------------------------------------------------------------------------------
# A postgres:// URL switches to PostgreSQL through psycopg 3 with a connection pool, which
# requires persistent connections to be off (the pool owns them).
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
_db = dj_database_url.parse(DATABASE_URL)
if _db["ENGINE"] == "django.db.backends.postgresql":
    # While the database is down a request fails within seconds (503 with Retry-After) instead
    # of holding a web worker. JIT off: planned over the run partitions, our short queries were
    # compiled for far longer than they run.
    _db["OPTIONS"] = {"connect_timeout": 2, "options": "-c jit=off"}
    # Lets the ingest path's server-binding cursor prepare its INSERT (Django's own cursors never
    # prepare); off behind a pooler that cannot keep them (PgBouncer in transaction mode < 1.21).
    if env_bool("DATABASE_PREPARED_STATEMENTS", True):
        _db["OPTIONS"]["prepare_threshold"] = 5
    if env_bool("DATABASE_POOL", True):
        _db["OPTIONS"]["pool"] = {
            "min_size": 1,
            "max_size": env_int("DATABASE_POOL_MAX", 10, minimum=1),
            "timeout": 2,
            # Each series of reconnection tries stops after a few seconds, so a server that is
            # back is used at once rather than after a delay as long as the outage was.
            "reconnect_timeout": 5,
        }
        # Checks each pooled connection as it is handed out (config/postgresql/base.py), in
        # place of the pool's own check, which CONN_HEALTH_CHECKS would turn on.
        _db["ENGINE"] = "config.postgresql"
    _db["CONN_MAX_AGE"] = 0
    # Without the pool, Django checks a connection before it reuses one.
    _db["CONN_HEALTH_CHECKS"] = "pool" not in _db["OPTIONS"]
elif _db["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the worker write while the web process reads; the timeout waits out short locks.
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
    # First: refuses a locked-out sign-in before any password is checked.
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

# --- Security ---------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads no cookie (the token rides on <body hx-headers>)
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
# HTTPS: the redirect, HSTS and the header a TLS-terminating proxy sets. Off by default (a fresh
# clone serves plain HTTP); docs/deployment.md turns them on.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SECURE_PROXY_SSL_HEADER = env_pair("SECURE_PROXY_SSL_HEADER")
# Proxies whose X-Forwarded-For is believed (addresses or networks); from anyone else the header
# is ignored and the client is the connection's own address.
TRUSTED_PROXIES = env_networks("TRUSTED_PROXIES")

# Sign-in throttling: after LOGIN_FAILURE_LIMIT wrong passwords for one user name from one
# address, that pair is locked out for LOGIN_LOCKOUT_MINUTES (each further try restarts it).
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = env_int("LOGIN_LOCKOUT_MINUTES", 15, minimum=1) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_CLIENT_IP_CALLABLE = "orchestrator.addresses.client_ip"
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"

# Django 5.2 has no built-in CSP: django-csp sends it. No inline script may run; the API docs page
# (Swagger UI) is served from bundled files; a nonce is added only where a page asks for one.
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

# --- API ---------------------------------------------------------------------------------------
# A batch of 1,000 runs with partial results fits well inside 10 MiB; anything bigger is a 413.
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 10 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES
API_MAX_BATCH = 1000
API_MAX_JSON_DEPTH = 32
# Requests per minute per token; 0 turns throttling off.
API_RATE_LIMIT_PER_MINUTE = env_int("API_RATE_LIMIT_PER_MINUTE", 6000)
# Seconds each web process remembers a token (a revocation elsewhere takes effect within them)
# and the policy version every API answer carries.
API_TOKEN_CACHE_SECONDS = 5
POLICY_VERSION_CACHE_SECONDS = 1
# Most single reports one web process stores together in one INSERT and commit.
INGEST_GROUP_MAX = 1000
# /metrics answers a bearer METRICS_TOKEN, or a client inside METRICS_ALLOWED_IPS (none by
# default: behind a same-host proxy every visitor would look local).
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
METRICS_ALLOWED_IPS = env_networks("METRICS_ALLOWED_IPS")


def env_trace_url(name: str) -> str:
    """A link to a trace in the operators' tracing tool: http(s), with a {trace_id} to fill."""
    raw = env_str(name, "").strip()
    if raw and not (raw.startswith(("http://", "https://")) and "{trace_id}" in raw):
        raise ImproperlyConfigured(
            f"{name}={raw!r} must be an http(s) URL containing {{trace_id}} "
            "(and optionally {span_id})"
        )
    return raw


# Where a run's trace opens, e.g. http://jaeger:16686/trace/{trace_id}?uiFind={span_id};
# empty: trace ids are shown and filterable, without a link.
TRACE_URL_TEMPLATE = env_trace_url("TRACE_URL_TEMPLATE")

# --- Celery ------------------------------------------------------------------------------------
# Default: kombu's filesystem transport, a real broker that needs no server, consumed by a real
# worker process. Production: redis://.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    # kombu's transport with atomic writes: its own lets a worker read a half-written message.
    CELERY_BROKER_TRANSPORT = "config.broker:Transport"
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
        # Fan-out (worker control, pidbox) would otherwise write ./control in the working folder.
        "control_folder": str(_broker_dir / "control"),
        # At kombu's default of 1 s a worker with prefetch 1 takes about one task per second.
        "polling_interval": 0.05,
    }
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
else:
    # An unacknowledged task comes back after the visibility timeout (long delays live in the
    # database, never in broker countdowns); a send to a broker that does not answer fails within
    # seconds and the outbox keeps the message.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600, minimum=10),
        "socket_connect_timeout": 2,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Nothing uses `celery inspect`/`control`, and a Redis outage seen first on that pub/sub
# connection made the worker exit instead of reconnecting.
CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
# A task running when the broker drops finishes (tasks are idempotent, runs hold a lease).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Deployments (or test sessions) sharing one broker each take a queue of their own.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "celery")
# The sweeper sends due retries and unsent outbox messages and takes back lost runs.
CELERY_SWEEP_SECONDS = 1
# A started run holds a lease its heartbeat renews; once it runs out the sweeper sends the run
# again, and after RUN_MAX_DELIVERIES starts without an outcome parks it for review. A run sent
# but never started, and a workflow with something due but untouched, are taken back after as
# long as a lease.
RUN_LEASE_SECONDS = env_int("RUN_LEASE_SECONDS", 60, minimum=3)
RUN_MAX_DELIVERIES = 3
LOST_DISPATCH_SECONDS = RUN_LEASE_SECONDS
NUDGE_SECONDS = RUN_LEASE_SECONDS
OUTBOX_RESEND_SECONDS = 5
# Webhooks: each attempt's timeout; attempts, and the backoff doubling from the base to the cap.
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
    "switch-efficacy": {
        "task": "orchestrator.tasks.refresh_switch_efficacy",
        "schedule": 150.0,
        "options": {"expires": 150},
    },
}
# Beat folds the last DASHBOARD_ROLLUP_LOOKBACK_HOURS of runs (their status changes after they
# are created) into hourly rollups and failure groups, and evaluates the alert rules.
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
}
# Beat folds the count deltas the run table's triggers append (PostgreSQL); readers add what is
# not folded yet, so this bounds the deltas' size, not the counts' freshness.
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
# Retention, every 6 hours: runs older than RUNS_RETENTION_DAYS go (whole partitions on
# PostgreSQL, so a run may stay RUN_PARTITION_DAYS longer), rollups and failure-group hours older
# than ROLLUP_RETENTION_DAYS, which must be at least as long; 0 keeps forever.
RUNS_RETENTION_DAYS = env_int("RUNS_RETENTION_DAYS", 30)
ROLLUP_RETENTION_DAYS = env_int("ROLLUP_RETENTION_DAYS", 400)
_RUNS_KEPT = RUNS_RETENTION_DAYS or float("inf")
if ROLLUP_RETENTION_DAYS and ROLLUP_RETENTION_DAYS < _RUNS_KEPT:
    raise ImproperlyConfigured(
        f"ROLLUP_RETENTION_DAYS={ROLLUP_RETENTION_DAYS} would drop rollups before the runs they "
        f"count (RUNS_RETENTION_DAYS={RUNS_RETENTION_DAYS}); keep rollups at least as long"
    )
# Each query not bounded by created_at plans and locks every partition, so a week each; beat
# keeps the next RUN_PARTITIONS_AHEAD days covered (a run outside lands in the default one).
RUN_PARTITION_DAYS = 7
RUN_PARTITIONS_AHEAD = 2
# The search table (PostgreSQL) is filled every RUN_SEARCH_FILL_SECONDS from
# RUN_SEARCH_OVERLAP_SECONDS before its mark; searches read newer runs from the run table.
RUN_SEARCH_FILL_SECONDS = 5
RUN_SEARCH_OVERLAP_SECONDS = 10
# A search whose text the planner expects in more entries than this walks the runs newest first;
# below, it starts from the trigram indexes (docs/run-indexes.md).
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
# The coordinator tries untried sources in the order of how often switching to each succeeded
# over SWITCH_EFFICACY_DAYS, once every candidate has SWITCH_EFFICACY_MIN_SWITCHES switches.
SWITCH_EFFICACY_ORDERING = True
SWITCH_EFFICACY_MIN_SWITCHES = 20
SWITCH_EFFICACY_DAYS = 28
# Retries without a success after which the retry audit names a task an override candidate.
RETRY_AUDIT_MIN_RETRIES = 3
# Service-level objectives: the share of finished runs that succeed over SLO_WINDOW_DAYS, per
# agent and per source (SLO_OBJECTIVE, or SLO_OBJECTIVES for named ones); burn-rate alerts use
# the multi-window pairs (fast: 1 h and 5 min; slow: 6 h and 30 min).
SLO_OBJECTIVE = env_float("SLO_OBJECTIVE", 0.99, 0.0, 1.0)
SLO_OBJECTIVES = env_objectives("SLO_OBJECTIVES")
SLO_WINDOW_DAYS = env_int("SLO_WINDOW_DAYS", 28, minimum=1)
# Modules whose `register(registry)` fills the source registry (capability -> ordered sources).
# None by default: the product ships no sources of its own (`make run` names the demo's).
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
        # One line per HTTP call the subagents make would drown the worker's own log.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # "No hostname was supplied" is what the filesystem broker's URL always looks like.
        "kombu.connection": {"level": "ERROR"},
    },
}
