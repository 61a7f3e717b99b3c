"""REST API v1 for agents and coordinators: one router per concern, mounted on one `api`, which
sets auth, the rate limit, the body parser and the error envelope once for all. Business rules
live in the models, `orchestrator.ingest` (every report and finish) and
`orchestrator.coordination`, never here.

A token reads and acts on its own work (the runs it reported, the workflows it started and their
runs, their review items); coordinators that read or act on what other tokens reported are granted
`read:all` / `act:all` (`scopes`). Idempotency keys are scoped per token.
"""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, re_path

from orchestrator.api import decisions, otlp, policies, reviews, runs, workflows
from orchestrator.api.auth import BearerToken, TokenRateThrottle
from orchestrator.api.bodies import EnvelopeParser
from orchestrator.api.docs import CachedSchemaAPI, Docs
from orchestrator.api.errors import API_NAMESPACE, install_handlers, not_found

DESCRIPTION = """
Agents report every run with its structured outcome; coordinators read runs and routing policies.

**Auth**: `Authorization: Bearer <token>` on every operation (`manage.py createtoken NAME`).

**Scopes**: a token reads and acts on its own work only: the runs it reported, the workflows it
started and the runs reported for them, their review items. Any other run, workflow or review item
is a 404, as an unknown id is. `read:all` reads everyone's (lists included); `act:all` acts on
everyone's (decisions, escalations, retries, finishing, acknowledgements). Scopes are granted in
the admin or with `manage.py createtoken NAME --scope read:all --scope act:all`. Policies and
classification are readable by every token.

**Errors** are JSON in the envelope shape agents report failures in: `status` "error", a taxonomy
`failure_type`, `retryable`, `retry_after` (seconds; also the `Retry-After` header on 429 and
503), `detail`, `errors` (one `{path, message}` per invalid field on 422), `attempted`,
`partial_results`, `alternatives`.

**Failure types** are the taxonomy's eight names; names from other vocabularies (`auth_error`,
`rate_limit`, `not_found`, `unknown` …) are read as their canonical one (docs/api.md: "Failure types
and their aliases") wherever a failure type is read; any other name is a 422 listing the valid ones.

**Policy version**: every answer carries `X-Policy-Version`; fetch `GET /policies` when it changes.

**Limits**: bodies up to `API_MAX_BODY_BYTES` (413 beyond), JSON nested at most
`API_MAX_JSON_DEPTH` levels, batches of at most `API_MAX_BATCH` runs, `API_RATE_LIMIT_PER_MINUTE`
requests per token per minute (429). U+0000 in any JSON string is replaced with U+FFFD (PostgreSQL
cannot store it).
"""


api = CachedSchemaAPI(
    title="Failsight API",
    version="1",
    description=DESCRIPTION,
    urls_namespace=API_NAMESPACE,
    auth=BearerToken(),
    throttle=TokenRateThrottle(),
    parser=EnvelopeParser(),
    docs=Docs(),
)
install_handlers(api)


api.add_router("/runs", runs.router)
api.add_router("/policies", policies.router)
api.add_router("", decisions.router)
api.add_router("/workflows", workflows.router)
api.add_router("/otlp", otlp.router)
api.add_router("/reviews", reviews.router)


def urls() -> tuple[list[URLPattern | URLResolver], str, str]:
    """The API's URL patterns, to mount with `path("api/v1/", urls())`."""
    patterns, app_name, namespace = api.urls
    return (
        [
            *patterns,
            re_path(r"^.*$", not_found, name="not-found"),
        ],
        app_name,
        namespace,
    )
