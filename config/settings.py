"""One settings file. Every knob comes from the environment through the small helpers below,
which fail loudly on a bad value; the defaults make a fresh clone run with no server at all
(SQLite and kombu's filesystem broker). The README lists every variable in one table."""

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
# A postgres:// URL switches to PostgreSQL through psycopg 3 with a connection pool (Django 5.1+),
# which requires persistent connections to be off (the pool owns them).
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
_db = dj_database_url.parse(DATABASE_URL)
if _db["ENGINE"] == "django.db.backends.postgresql":
    # Fail fast while the database is down: a request waits at most these few seconds for a
    # connection (then answers 503 with Retry-After) instead of holding a web worker for long.
    _db["OPTIONS"] = {"connect_timeout": env_int("DATABASE_CONNECT_TIMEOUT", 2, minimum=1)}
    # PostgreSQL's JIT compiles a query whose estimated cost is high, and a query over the day
    # partitions of the run table is estimated high and planned with a node per partition: at
    # 10M runs, compiling one hour's failure endings took 61 s for a query that runs in 0.3 s.
    # Our queries are short; compiling them never pays. DATABASE_JIT=1 restores the default.
    if not env_bool("DATABASE_JIT", False):
        _db["OPTIONS"]["options"] = "-c jit=off"
    # Django turns psycopg's prepared statements off (prepare_threshold None), which also made
    # the single report's `prepare=True` a no-op: its INSERT was parsed and planned on every
    # report, 100 µs of its ~450. Django's own cursors bind on the client and never prepare;
    # only the ingest path's explicit server-binding cursor does. Off for a pooler that cannot
    # keep prepared statements (PgBouncer in transaction mode before 1.21).
    if env_bool("DATABASE_PREPARED_STATEMENTS", True):
        _db["OPTIONS"]["prepare_threshold"] = 5
    if env_bool("DATABASE_POOL", True):
        _db["OPTIONS"]["pool"] = {
            "min_size": env_int("DATABASE_POOL_MIN", 1),
            "max_size": env_int("DATABASE_POOL_MAX", 10, minimum=1),
            "timeout": env_int("DATABASE_POOL_TIMEOUT", 2, minimum=1),
            # The pool retries a lost server with doubling delays; stopping each series after a
            # few seconds lets the next request start a new one, so a server that is back is
            # used at once rather than after a delay as long as the outage was.
            "reconnect_timeout": 5,
        }
    _db["CONN_MAX_AGE"] = 0
    # With the pool, Django has it check each connection before handing it out
    # (`ConnectionPool.check_connection`): one broken by a database restart is replaced.
    _db["CONN_HEALTH_CHECKS"] = True
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
# clone serves plain HTTP); the README's production settings turn them on.
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
API_MAX_BATCH = env_int("API_MAX_BATCH", 1000, minimum=1)
API_MAX_JSON_DEPTH = env_int("API_MAX_JSON_DEPTH", 32, minimum=2)
# Requests per minute per token; 0 turns throttling off.
API_RATE_LIMIT_PER_MINUTE = env_int("API_RATE_LIMIT_PER_MINUTE", 6000)
# Seconds each web process remembers a token (revocation elsewhere takes effect within them; at
# once in the revoking process) and the policy version API answers announce; 0: not at all.
API_TOKEN_CACHE_SECONDS = env_int("API_TOKEN_CACHE_SECONDS", 5)
POLICY_VERSION_CACHE_SECONDS = env_int("POLICY_VERSION_CACHE_SECONDS", 1)
# Single reports arriving together in one web process share one INSERT and one commit (group
# commit), at most this many per group; 1 stores each on its own.
INGEST_GROUP_MAX = env_int("INGEST_GROUP_MAX", 1000, minimum=1)
# The Prometheus /metrics endpoint answers a bearer METRICS_TOKEN, or a client address inside
# METRICS_ALLOWED_IPS when that is set explicitly (none by default: a same-host proxy would
# otherwise make every visitor look local).
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
        # kombu polls the folder; at its default of 1 s a worker with prefetch 1 takes only
        # about one task per second per process, and the sweeper's tasks expire in the queue.
        "polling_interval": 0.05,
    }
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
else:
    # An unacknowledged task comes back after the visibility timeout; long delays live in the
    # database (a due time swept by beat), never in broker countdowns longer than this. A broker
    # that does not answer fails a send within seconds: the outbox keeps the message meanwhile.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600, minimum=10),
        "socket_connect_timeout": 2,
    }
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# No remote control (nothing here uses `celery inspect` or `control`): its pub/sub connection is
# the one on which a Redis outage can surface while the task consumer's BRPOP is still pending;
# kombu then closes that channel twice, the second time after detaching its transport, and the
# worker exits on an AttributeError instead of reconnecting whenever a task was in flight.
CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
# A task running when the broker drops finishes its work (tasks are idempotent by their ids and
# a run's lease keeps a redelivery from running it twice) rather than being killed mid-call.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# A unique queue per test session keeps integration tests off a developer's running worker.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "celery")
# The sweeper enqueues due retries (delays live in the database, never in long broker ETAs); the
# fallback task resolves review items left undecided past their deadline.
CELERY_SWEEP_SECONDS = env_int("CELERY_SWEEP_SECONDS", 1, minimum=1)
# Recovery windows, in seconds. A started run holds a lease its heartbeat renews; once it has run
# out the sweeper takes the run back for a new delivery, and after RUN_MAX_DELIVERIES starts
# without an outcome the run is parked for review. A run sent but not started after
# LOST_DISPATCH_SECONDS is sent again; a workflow with something due and untouched for
# NUDGE_SECONDS gets one step per window; an outbox message the relay could not send is tried
# again every OUTBOX_RESEND_SECONDS.
RUN_LEASE_SECONDS = env_int("RUN_LEASE_SECONDS", 60, minimum=3)
RUN_MAX_DELIVERIES = env_int("RUN_MAX_DELIVERIES", 3, minimum=1)
LOST_DISPATCH_SECONDS = env_int("LOST_DISPATCH_SECONDS", 60, minimum=1)
NUDGE_SECONDS = env_int("NUDGE_SECONDS", 60, minimum=1)
OUTBOX_RESEND_SECONDS = env_int("OUTBOX_RESEND_SECONDS", 5, minimum=1)
# Webhooks of resolutions (a token's callback URL): each attempt's timeout, how many attempts,
# and the backoff between them (doubling from the base, capped), in seconds.
WEBHOOK_TIMEOUT_SECONDS = env_int("WEBHOOK_TIMEOUT_SECONDS", 5, minimum=1)
WEBHOOK_MAX_ATTEMPTS = env_int("WEBHOOK_MAX_ATTEMPTS", 8, minimum=1)
WEBHOOK_BACKOFF_SECONDS = env_int("WEBHOOK_BACKOFF_SECONDS", 2, minimum=1)
WEBHOOK_BACKOFF_MAX_SECONDS = env_int("WEBHOOK_BACKOFF_MAX_SECONDS", 600, minimum=1)
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
# Insights folds the last hours of runs into hourly rollups (the tiles' and /metrics'
# counts) and failure groups, and fires webhook alerts whose threshold is crossed.
DASHBOARD_GROUPS_SECONDS = env_int("DASHBOARD_GROUPS_SECONDS", 60, minimum=1)
CELERY_BEAT_SCHEDULE |= {
    "insights-refresh-rollups": {"task": "insights.tasks.refresh_rollups", "schedule": 60.0},
    "insights-fold-failure-groups": {
        "task": "insights.tasks.fold_failure_groups",
        "schedule": float(DASHBOARD_GROUPS_SECONDS),
        "options": {"expires": 2 * DASHBOARD_GROUPS_SECONDS},
    },
    "insights-evaluate-alerts": {"task": "insights.tasks.evaluate_alerts", "schedule": 60.0},
}
# On PostgreSQL the run table's triggers append count deltas; beat folds them into the minute
# rollups, /metrics' running totals and the workflows' counters this often (readers add what is
# not folded yet, so this bounds the deltas' size, not the counts' freshness).
COUNTS_FOLD_SECONDS = env_int("COUNTS_FOLD_SECONDS", 5, minimum=1)
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
# Retention (`insights.tasks.apply_retention`, daily): runs older than RUNS_RETENTION_DAYS go
# (whole partitions on PostgreSQL, so a run is kept up to RUN_PARTITION_DAYS longer), rollups and
# failure-group hours older than ROLLUP_RETENTION_DAYS, which must be at least as long (the tiles
# outlive the runs); 0 keeps forever. A run partition spans RUN_PARTITION_DAYS days (a week:
# every partition, empty or not, is planned and locked by each query not bounded by created_at,
# so fewer is faster; see orchestrator/partitions.py). Beat covers the next RUN_PARTITIONS_AHEAD
# days with partitions every hour (a run no partition covers lands in the default one anyway).
RUNS_RETENTION_DAYS = env_int("RUNS_RETENTION_DAYS", 30)
ROLLUP_RETENTION_DAYS = env_int("ROLLUP_RETENTION_DAYS", 400)
_RUNS_KEPT = RUNS_RETENTION_DAYS or float("inf")
if ROLLUP_RETENTION_DAYS and ROLLUP_RETENTION_DAYS < _RUNS_KEPT:
    raise ImproperlyConfigured(
        f"ROLLUP_RETENTION_DAYS={ROLLUP_RETENTION_DAYS} would drop rollups before the runs they "
        f"count (RUNS_RETENTION_DAYS={RUNS_RETENTION_DAYS}); keep rollups at least as long"
    )
RUN_PARTITIONS_AHEAD = env_int("RUN_PARTITIONS_AHEAD", 2, minimum=1)
# The runs search's trigram indexes live in their own table on PostgreSQL, off the ingest path
# (orchestrator/search.py): beat adds the new runs' entries every RUN_SEARCH_FILL_SECONDS,
# re-reading RUN_SEARCH_OVERLAP_SECONDS before where it stopped (a run whose transaction commits
# later than that after its creation is found only by its next edit). Searches read the runs of
# those last seconds from the run table, so a search finds a run as soon as it is committed.
RUN_SEARCH_FILL_SECONDS = env_int("RUN_SEARCH_FILL_SECONDS", 5, minimum=1)
RUN_SEARCH_OVERLAP_SECONDS = env_int("RUN_SEARCH_OVERLAP_SECONDS", 10, minimum=1)
# A search whose text the planner expects in more entries of the window than this walks the runs
# newest first (the first page comes after a few hundred); below, it starts from the trigram
# indexes (docs/run-indexes.md has the measurements behind the default).
RUN_SEARCH_WALK_ABOVE = env_int("RUN_SEARCH_WALK_ABOVE", 2000, minimum=0)
RUN_PARTITION_DAYS = env_int("RUN_PARTITION_DAYS", 7, minimum=1)
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
DASHBOARD_POLL_SECONDS = env_int("DASHBOARD_POLL_SECONDS", 10, minimum=1)
DASHBOARD_ROLLUP_LOOKBACK_HOURS = env_int("DASHBOARD_ROLLUP_LOOKBACK_HOURS", 3, minimum=2)
# Switch efficacy: the coordinator tries a capability's untried sources in the order of how often
# switching to each succeeded (over SWITCH_EFFICACY_DAYS), once every candidate has at least
# SWITCH_EFFICACY_MIN_SWITCHES recorded switches; off, or with less data, the registry's order.
SWITCH_EFFICACY_ORDERING = env_bool("SWITCH_EFFICACY_ORDERING", True)
SWITCH_EFFICACY_MIN_SWITCHES = env_int("SWITCH_EFFICACY_MIN_SWITCHES", 20, minimum=1)
SWITCH_EFFICACY_DAYS = env_int("SWITCH_EFFICACY_DAYS", 28, minimum=1)
# Retries a retryable failure may take without recovering before the retry audit names it a
# candidate for a provider override.
RETRY_AUDIT_MIN_RETRIES = env_int("RETRY_AUDIT_MIN_RETRIES", 3, minimum=1)
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
