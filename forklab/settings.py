"""forklab settings: one module, driven by environment variables.

Every variable is read through a helper that refuses a malformed value with a message naming
the variable, so a typo fails at start-up instead of changing behaviour silently.

Embedded default: SQLite at ``$FORKLAB_HOME/forklab.sqlite3``, in-memory channel layer.
Scale-out: ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL`` (channel layer).

Where data goes: everything forklab writes (the SQLite database and its test copies, the
generated secret key, collected static files) lives under ``FORKLAB_HOME`` — by default the
per-user data directory (``platformdirs.user_data_dir("forklab")``: ``~/.local/share/forklab``
on Linux) — unless a more specific variable moves one piece. Invariant: no default path is
inside the installed package; nothing is ever written next to the code. A source checkout
keeps its data in ``var/`` because ``./dev`` and ``manage.py`` say so (``FORKLAB_HOME``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext
import platformdirs
from django.core.exceptions import ImproperlyConfigured

from forklab.engine.environment import max_concurrency_from_env
from forklab.engine.errors import ConfigurationError

# Lets classes subscript Django's generic types at run time (admin.ModelAdmin[Run], …), as
# mypy strict wants them written.
django_stubs_ext.monkeypatch()


def _path(name: str, default: Path) -> Path:
    """A directory or file named by the variable ``name`` (``~`` expanded), else ``default``;
    made absolute so a process started elsewhere finds the same place."""
    raw = os.environ.get(name, "").strip()
    return (Path(raw).expanduser() if raw else default).absolute()


# The data directory, and the pieces a deployment may put elsewhere (docs/deployment.md).
FORKLAB_HOME = _path("FORKLAB_HOME", Path(platformdirs.user_data_dir("forklab", appauthor=False)))
# the SQLite database (and the test runs' copies) and the generated secret key
VAR_DIR = _path("FORKLAB_VAR_DIR", FORKLAB_HOME)
SECRET_KEY_FILE = _path("FORKLAB_SECRET_KEY_FILE", VAR_DIR / "secret_key")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r}: expected one of 1/0, true/false, yes/no, on/off")


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected an integer >= {minimum}")
    return value


def envfloat(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected a number") from None
    if not math.isfinite(value) or (minimum is not None and value < minimum):
        raise ImproperlyConfigured(f"{name}={raw!r}: expected a finite number >= {minimum}")
    return value


def envlist(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def envchoice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    if raw not in choices:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected one of {', '.join(choices)}")
    return raw


def envjson(name: str, default: Any) -> Any:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"{name}: not valid JSON ({exc})") from None


def envmap(name: str) -> dict[str, str]:
    """A name -> value map: a JSON object of strings, or ``a=x,b=y`` (names and values
    stripped; a name may not repeat)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return {}
    if raw.lstrip().startswith("{"):
        data = envjson(name, {})
        if not all(isinstance(k, str) and isinstance(v, str) and k.strip() and v.strip()
                   for k, v in data.items()):
            raise ImproperlyConfigured(f"{name}: expected a JSON object of non-empty strings")
        return {k.strip(): v.strip() for k, v in data.items()}
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, value = (p.strip() for p in item.partition("="))
        if not sep or not key or not value or key in pairs:
            raise ImproperlyConfigured(
                f"{name}={raw!r}: expected NAME=VALUE pairs separated by commas, each name "
                f"once (or a JSON object); {item!r} is not one")
        pairs[key] = value
    return pairs


def envprices(name: str) -> dict[str, dict[str, float]]:
    """``{"model": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}, ...}`` (USD per 1M tokens)."""
    data = envjson(name, {})
    if not isinstance(data, dict):
        raise ImproperlyConfigured(f"{name}: expected a JSON object of model -> price")
    prices: dict[str, dict[str, float]] = {}
    for model, price in data.items():
        try:
            prices[model] = {
                "input_per_mtok": float(price["input_per_mtok"]),
                "output_per_mtok": float(price["output_per_mtok"]),
            }
        except (TypeError, KeyError, ValueError):
            raise ImproperlyConfigured(
                f"{name}: price of {model!r} must be an object with numeric "
                "'input_per_mtok' and 'output_per_mtok'"
            ) from None
        if min(prices[model].values()) < 0:
            raise ImproperlyConfigured(f"{name}: price of {model!r} must not be negative")
    return prices


# -- core ------------------------------------------------------------------------------------

# Debug is off unless asked for (`./dev start` asks: FORKLAB_DEBUG=1).
DEBUG = envbool("FORKLAB_DEBUG", False)


def _secret_key() -> str:
    """FORKLAB_SECRET_KEY; else, in development, a fixed key; else one generated once and
    kept in ``SECRET_KEY_FILE`` (0600) — right for one host, while every process of a
    multi-host deployment must be given the same FORKLAB_SECRET_KEY."""
    key = os.environ.get("FORKLAB_SECRET_KEY", "")
    if key:
        return key
    if DEBUG:
        return "forklab-insecure-development-key-do-not-use-in-production"
    path = SECRET_KEY_FILE
    try:
        return path.read_text().strip() or _new_key(path)
    except FileNotFoundError:
        return _new_key(path)


def _new_key(path: Path) -> str:
    import secrets

    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process wrote it first: use theirs
        return path.read_text().strip()
    with os.fdopen(fd, "w") as file:
        file.write(key)
    return key


SECRET_KEY = _secret_key()

ALLOWED_HOSTS = envlist("FORKLAB_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("FORKLAB_CSRF_TRUSTED_ORIGINS")

# HTTPS deployments (docs/deployment.md): secure cookies, HSTS, the proxy's scheme header.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = envbool("FORKLAB_SECURE_COOKIES", False)
SECURE_HSTS_SECONDS = envint("FORKLAB_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("FORKLAB_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = envbool("FORKLAB_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = envbool("FORKLAB_SSL_REDIRECT", False)
if envbool("FORKLAB_BEHIND_HTTPS_PROXY", False):  # the proxy sets X-Forwarded-Proto
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "channels",
    "django_htmx",
    "forklab.runs",
    "forklab.web",  # the dashboard: templates tags, static files
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "forklab.runs.middleware.refuse_unstorable_input",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "forklab.web.middleware.PlainErrorPages",  # no debug page for anonymous / share readers
]

ROOT_URLCONF = "forklab.urls"
ASGI_APPLICATION = "forklab.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # the pages' templates are forklab.web's (forklab/web/templates), found as an app's
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# -- database --------------------------------------------------------------------------------

SQLITE_OPTIONS = {
    # BEGIN IMMEDIATE takes the write lock up front, so two appenders to one run serialize
    # instead of both reading the same last seq (see forklab/runs/store.py).
    "transaction_mode": "IMMEDIATE",
    "timeout": envint("FORKLAB_SQLITE_TIMEOUT", 20, minimum=1),
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}


def _sqlite_test_name() -> str:
    # A file (not :memory:) so threads share the test database; per-process so concurrent
    # test runs on one machine never share one.
    return os.environ.get("FORKLAB_TEST_SQLITE") or str(
        VAR_DIR / f"test-forklab-{os.getpid()}.sqlite3"
    )


# How long a thread keeps its database connection between requests and tasks. Web requests
# run on a fixed set of reused threads (forklab.serving), so a kept connection is reused by
# the next request instead of each request connecting anew (for PostgreSQL a TCP connect,
# authentication and a server process forked per request: a third of a small request's
# cost). Checked before reuse (CONN_HEALTH_CHECKS), so a restarted database costs one error-
# free reconnect. 0 closes every connection at the end of its request.
CONN_MAX_AGE = envint("FORKLAB_CONN_MAX_AGE", 60, minimum=0)


def database_from_url(url: str) -> dict[str, Any]:
    try:
        config: dict[str, Any] = dict(dj_database_url.parse(
            url, conn_max_age=CONN_MAX_AGE, conn_health_checks=True,
        ))
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL: {exc}") from None
    if config["ENGINE"] == "django.db.backends.sqlite3":
        config["OPTIONS"] = {**SQLITE_OPTIONS, **config.get("OPTIONS", {})}
        config["TEST"] = {"NAME": _sqlite_test_name()}
    elif config["ENGINE"] == "django.db.backends.postgresql":
        config["TEST"] = {"NAME": f"test_forklab_{os.getpid()}"}
    return config


DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    DATABASES = {"default": database_from_url(DATABASE_URL)}
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "forklab.sqlite3",
            "CONN_MAX_AGE": CONN_MAX_AGE,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": dict(SQLITE_OPTIONS),
            "TEST": {"NAME": _sqlite_test_name()},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# A web process runs at most this many HTTP requests' sync work at once, each on a reused
# thread (forklab.serving); more wait their turn without holding a thread or a connection.
FORKLAB_WEB_THREADS = envint("FORKLAB_WEB_THREADS", 8, minimum=1)
# A web process runs its websocket streams' database reads (auth, access, log pages) on this
# many threads of their own (forklab.runs.streams), not on asgiref's one shared sync thread.
FORKLAB_WS_DB_THREADS = envint("FORKLAB_WS_DB_THREADS", 4, minimum=1)

# -- channels --------------------------------------------------------------------------------

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # socket_timeout None: idle websockets would otherwise drop after a few seconds.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": None}]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# -- background work (django.tasks) ----------------------------------------------------------
# Embedded default: a thread pool inside the server process. Scale-out: FORKLAB_TASKS_BACKEND=db
# puts tasks on a database queue (django-tasks-db, the `scale` extra) that `forklab worker`
# (`manage.py db_worker`) processes run (see docs/deployment.md). A dotted path selects any other
# django.tasks backend.
TASK_BACKENDS = {
    "threads": "forklab.runs.task_backends.ThreadPoolBackend",
    # django-tasks-db's queue, its task row inserted without the ORM's per-row compiling
    "db": "forklab.runs.queue_backend.DatabaseBackend",
}
_tasks_backend = os.environ.get("FORKLAB_TASKS_BACKEND", "").strip() or "threads"
if "." not in _tasks_backend and _tasks_backend not in TASK_BACKENDS:
    raise ImproperlyConfigured(
        f"FORKLAB_TASKS_BACKEND={_tasks_backend!r}: expected one of {', '.join(TASK_BACKENDS)} "
        "or the dotted path of a django.tasks backend")
_tasks_backend = TASK_BACKENDS.get(_tasks_backend, _tasks_backend)
TASKS = {
    "default": {
        "BACKEND": _tasks_backend,
        "OPTIONS": envjson("FORKLAB_TASKS_OPTIONS",
                           {"MAX_WORKERS": envint("FORKLAB_TASK_WORKERS", 4, minimum=1)}
                           if _tasks_backend == TASK_BACKENDS["threads"] else {}),
    }
}
if _tasks_backend.startswith("django_tasks_db.") or _tasks_backend == TASK_BACKENDS["db"]:
    INSTALLED_APPS += ["django_tasks_db"]  # its queue table and the db_worker command

# Leases and recovery (forklab.runs.leases, forklab.runs.recovery): a process executing a run
# holds its lease for FORKLAB_LEASE_TTL_S and renews it every FORKLAB_HEARTBEAT_S; every web
# process and worker sweeps for expired leases and lost queued work at start-up and every
# FORKLAB_RECOVERY_SWEEP_S (0: never — tests drive recovery themselves). A crashed process's
# run is resumed (or failed ``worker_lost``) within about TTL + sweep interval.
FORKLAB_LEASE_TTL_S = envfloat("FORKLAB_LEASE_TTL_S", 30.0, minimum=0.5)
FORKLAB_HEARTBEAT_S = envfloat("FORKLAB_HEARTBEAT_S", FORKLAB_LEASE_TTL_S / 3, minimum=0.1)
FORKLAB_RECOVERY_SWEEP_S = envfloat("FORKLAB_RECOVERY_SWEEP_S", 10.0, minimum=0.0)

# The CPU priority a `db_worker` lowers itself to at start-up (os.nice increment, 0-19; 0:
# unchanged). Accepting a fork is the interactive path; a tail is throughput work that can
# wait a few milliseconds: on hosts that run web processes and workers side by side, a
# positive value keeps a burst of tails from delaying the 202s.
FORKLAB_WORKER_NICE = envint("FORKLAB_WORKER_NICE", 0, minimum=0)
if FORKLAB_WORKER_NICE > 19:
    raise ImproperlyConfigured(f"FORKLAB_WORKER_NICE={FORKLAB_WORKER_NICE}: expected 0-19")
if FORKLAB_HEARTBEAT_S >= FORKLAB_LEASE_TTL_S:
    raise ImproperlyConfigured("FORKLAB_HEARTBEAT_S must be shorter than FORKLAB_LEASE_TTL_S")

# -- auth, i18n, static ----------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# The sources are the apps' static/ directories (forklab/web/static and the libraries');
# collectstatic writes the served copies here.
STATIC_ROOT = _path("FORKLAB_STATIC_ROOT", FORKLAB_HOME / "static")
# daphne serves no static files itself: WhiteNoise does, under content-hashed names written by
# `collectstatic` (forklab.web.staticfiles); 0 when a proxy serves STATIC_ROOT instead.
FORKLAB_SERVE_STATIC = envbool("FORKLAB_SERVE_STATIC", True)
if FORKLAB_SERVE_STATIC:
    MIDDLEWARE.insert(MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1,
                      "whitenoise.middleware.WhiteNoiseMiddleware")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "forklab.web.staticfiles.HashedStaticFiles"},
}

# -- REST API --------------------------------------------------------------------------------

# A web process remembers an API token it confirmed for this many seconds (forklab.api.auth),
# saving the token query of every request a script sends with it. A deleted token or a
# deactivated user stays accepted by the *other* processes for up to this long; 0: ask the
# database on every request.
FORKLAB_TOKEN_CACHE_S = envfloat("FORKLAB_TOKEN_CACHE_S", 5.0, minimum=0.0)

REST_FRAMEWORK = {
    # Token first: an unauthenticated API request gets 401 with ``WWW-Authenticate: Token``.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "forklab.api.auth.CachedTokenAuthentication",  # DRF's, remembering recent tokens
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["forklab.api.inputs.BoundedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "forklab.api.pagination.Pages",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "forklab.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "forklab API",
    "DESCRIPTION": (
        "Fork recorded agent-workflow runs: change one thing, replay the prefix for free, run "
        "the tail live, see what became different.\n\n"
        "Authenticate with a session or `Authorization: Token <key>` (`forklab "
        "drf_create_token USER`). Every error is `{\"code\", \"detail\", ...context}`; see "
        "`forklab.runs.error_status` for the code → status map: 400 a malformed request (body, query "
        "or graph document), 401 not authenticated, 403 role, 404 unknown (or outside your "
        "projects), 409 conflict or unfinished run, 422 a well-formed request the named run "
        "cannot take (fork point, changes, budget, policy, replay)."
    ),
    "VERSION": "1",
    # 3.1: request bodies are documented from the pydantic specs (JSON Schema 2020-12).
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The engine's words (forklab.engine.status) are named once each in the schema: a run's
    # status and a path entry's (execution) status are different sets under one field name.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "forklab.engine.status.RunStatus.values",
        "ExecutionStatusEnum": "forklab.engine.status.EXECUTION_STATUSES",
    },
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "forklab.api.schema.blank_query_means_absent",
    ],
    # The docs page works offline: Swagger UI from the drf-spectacular-sidecar package.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}
# Static files of the offline docs page (served like the rest of /static/).
INSTALLED_APPS += ["drf_spectacular_sidecar"]

# -- forklab engine --------------------------------------------------------------------------

FORKLAB_PRICES = envprices("FORKLAB_PRICES")
# A run imported from a trace is forked only once its trace received no span or log record
# for this long (late spans rewrite its log; docs/traces.md "Storage, re-sends and late spans")
FORKLAB_TRACE_SETTLE_S = envfloat("FORKLAB_TRACE_SETTLE_S", 5.0, minimum=0.0)
# The OTLP receiver stores a request's spans, then maps the traces they extend into runs:
# in the request when it has at most FORKLAB_OTLP_INLINE_TRACES traces, each holding fewer
# than FORKLAB_TRACE_INLINE_SPANS spans before it, and no mapping is running in the process;
# else in the background (the backlog task), each trace FORKLAB_TRACE_REMAP_DELAY seconds
# after it joined the backlog at the earliest (docs/traces.md "Storage, re-sends and late spans")
FORKLAB_OTLP_INLINE_TRACES = envint("FORKLAB_OTLP_INLINE_TRACES", 16, minimum=0)
FORKLAB_TRACE_INLINE_SPANS = envint("FORKLAB_TRACE_INLINE_SPANS", 128, minimum=0)
FORKLAB_TRACE_REMAP_DELAY = envfloat("FORKLAB_TRACE_REMAP_DELAY", 1.0, minimum=0.0)
# How long an OTLP request waits for the stores ahead of it in this process before it is
# answered 429 with Retry-After (exporters retry); below the SQLite lock timeout
FORKLAB_OTLP_WAIT = envfloat("FORKLAB_OTLP_WAIT", 15.0, minimum=0.0)
# Nodes of one run executing at once: the engine's Environment reads FORKLAB_MAX_CONCURRENCY
# itself (engine code never reads Django settings); checked here so a bad value stops start-up.
try:
    FORKLAB_MAX_CONCURRENCY = max_concurrency_from_env()
except ConfigurationError as exc:
    raise ImproperlyConfigured(exc.message) from None
FORKLAB_TOOL_MODULES = envlist("FORKLAB_TOOL_MODULES")
# Module prefixes code-first workflows may be imported from (`record --workflow acme.agents:
# support`, POST /runs/ with `workflow`), beside forklab.demo_agents (SPEC §7).
FORKLAB_WORKFLOW_MODULES = envlist("FORKLAB_WORKFLOW_MODULES")
# A trace's agent or workflow name -> the registered workflow that runs it (module:function,
# or the id of a workflow recorded in the project): forks of those imported runs re-execute
# the code with the imported calls answering the prefix (SPEC §8 (b), docs/traces.md).
FORKLAB_WORKFLOW_MAP = envmap("FORKLAB_WORKFLOW_MAP")
# Dotted paths of extra model providers (a class or factory called with no argument), each
# registered under its `name` — which may replace the built-in `scripted`.
FORKLAB_PROVIDERS = envlist("FORKLAB_PROVIDERS")
# Vendor providers (SPEC §6.4), each registered when its base URL or key is set. Retries:
# _MAX_RETRIES more attempts after the first, on 408/409/429/5xx and lost connections.
FORKLAB_OPENAI_BASE_URL = os.environ.get("FORKLAB_OPENAI_BASE_URL", "")
FORKLAB_OPENAI_API_KEY = os.environ.get("FORKLAB_OPENAI_API_KEY", "")
FORKLAB_OPENAI_ORGANIZATION = os.environ.get("FORKLAB_OPENAI_ORGANIZATION", "")
FORKLAB_OPENAI_TIMEOUT_S = envfloat("FORKLAB_OPENAI_TIMEOUT_S", 60.0, minimum=0.001)
FORKLAB_OPENAI_MAX_RETRIES = envint("FORKLAB_OPENAI_MAX_RETRIES", 3, minimum=0)
# the API's root (…/v1/messages is appended), as the official SDK takes it
FORKLAB_ANTHROPIC_BASE_URL = os.environ.get("FORKLAB_ANTHROPIC_BASE_URL", "")
FORKLAB_ANTHROPIC_API_KEY = os.environ.get("FORKLAB_ANTHROPIC_API_KEY", "")
FORKLAB_ANTHROPIC_TIMEOUT_S = envfloat("FORKLAB_ANTHROPIC_TIMEOUT_S", 60.0, minimum=0.001)
FORKLAB_ANTHROPIC_MAX_RETRIES = envint("FORKLAB_ANTHROPIC_MAX_RETRIES", 3, minimum=0)
# key names whose values action records keep only as [REDACTED]#n, on top of the engine's
# defaults (api_key, authorization, password, token, secret, … — forklab.engine.redaction)
FORKLAB_REDACT_KEYS = envlist("FORKLAB_REDACT_KEYS")

# -- observability (SPEC §3.11) ---------------------------------------------------------------
# Logs: structured, one JSON object per line on stderr (so command output on stdout stays
# clean); FORKLAB_LOG_FORMAT=console for key=value lines in a terminal. `extra={...}` fields of
# stdlib log calls (e.g. replay.fork.fork_started's base_run_id, fork_sequence_id) become keys.
# Metrics: GET /metrics (forklab.runs.metrics). Traces: the engine uses the OpenTelemetry API;
# an SDK exporting over OTLP/HTTP is configured at start-up only when
# OTEL_EXPORTER_OTLP_ENDPOINT is set (the `otel` extra; forklab.runs.observability).

FORKLAB_LOG_FORMAT = envchoice("FORKLAB_LOG_FORMAT", "json", ("json", "console"))
# /metrics: with a token, scrapers send `Authorization: Bearer <token>`; without one only the
# addresses (or networks) of FORKLAB_METRICS_ALLOW may read it — loopback by default; `*`
# opens it to everyone.
FORKLAB_METRICS_TOKEN = os.environ.get("FORKLAB_METRICS_TOKEN", "")
FORKLAB_METRICS_ALLOW = envlist("FORKLAB_METRICS_ALLOW", ["127.0.0.1", "::1"])
# The largest request body the API parses (a graph document may be this large). It is also
# Django's own body limit, so one setting decides: a bigger body is the API's 400
# ``invalid_input`` (or the dashboard's 400 page), whichever layer reads it first.
FORKLAB_MAX_BODY_BYTES = envint("FORKLAB_MAX_BODY_BYTES", 16 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = FORKLAB_MAX_BODY_BYTES
FORKLAB_STREAM_POLL_S = envint("FORKLAB_STREAM_POLL_S", 5, minimum=1)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "structured": {
            "()": "forklab.runs.observability.structured_formatter",
            "renderer": FORKLAB_LOG_FORMAT,
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "structured",
                             "stream": "ext://sys.stderr"}},
    "root": {"handlers": ["console"], "level": envchoice(
        "FORKLAB_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
    )},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
