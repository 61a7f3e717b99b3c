"""REST API v1 for agents and coordinators: report runs, read runs, read routing policies.

Cross-cutting behaviour is set once on `api`, so any router mounted on it gets the same: bearer
auth on every operation, the per-token rate limit, the JSON body parser (size, depth, NUL), and
the error envelope for every failure (see orchestrator.apierrors). A router added later needs only
`api.add_router("/prefix", router)` and `response={200: X, **error_responses()}` in its decorators.

Every valid token sees every run: this is an internal multi-agent system where coordinators read
what their subagents (holding other tokens) reported. Idempotency keys are scoped per token.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path, re_path
from ninja import Header, NinjaAPI, Query, Router
from ninja.responses import Status

from orchestrator import ingest
from orchestrator.apiauth import BearerToken, TokenRateThrottle
from orchestrator.apidocs import LocalSwagger, docs_asset
from orchestrator.apierrors import (
    EnvelopeParser,
    FieldError,
    error_responses,
    install_handlers,
    invalid,
    json_method_not_allowed,
    not_found,
    not_found_error,
)
from orchestrator.keyset import decode_cursor, encode_cursor
from orchestrator.models import PolicyState, ProviderOverride, RoutingPolicy, Run
from orchestrator.schemas import (
    BatchResultOut,
    PoliciesOut,
    RunBatchIn,
    RunFilters,
    RunIn,
    RunListOut,
    RunOut,
    Str255,
)

DESCRIPTION = """
Agents report every run with its structured outcome; coordinators read runs and routing policies.

**Auth**: `Authorization: Bearer <token>` on every operation (`manage.py createtoken NAME`).

**Errors** are JSON in the envelope shape agents report failures in: `status` "error", a taxonomy
`failure_type`, `retryable`, `retry_after` (seconds; also the `Retry-After` header on 429 and
503), `detail`, `errors` (one `{path, message}` per invalid field on 422), `attempted`,
`partial_results`, `alternatives`.

**Limits**: bodies up to `API_MAX_BODY_BYTES` (413 beyond), JSON nested at most
`API_MAX_JSON_DEPTH` levels, batches of at most `API_MAX_BATCH` runs, `API_RATE_LIMIT_PER_MINUTE`
requests per token per minute (429). U+0000 in any JSON string is replaced with U+FFFD (PostgreSQL
cannot store it).
"""


class FailsightAPI(NinjaAPI):
    """NinjaAPI whose every answer under its mount point is JSON, even outside its routes."""

    def _get_urls(self) -> list[URLPattern | URLResolver]:
        urls = [
            path("docs/assets/<str:name>", docs_asset, name="docs-asset"),
            *super()._get_urls(),
        ]
        for pattern in urls:
            if isinstance(pattern, URLPattern):
                pattern.callback = json_method_not_allowed(pattern.callback)
        # Last: any other path under the mount point is a JSON 404, not Django's HTML page.
        urls.append(re_path(r"^.*$", not_found, name="not-found"))
        return urls


api = FailsightAPI(
    title="Failsight API",
    version="1",
    description=DESCRIPTION,
    urls_namespace="api",
    auth=BearerToken(),
    throttle=TokenRateThrottle(),
    parser=EnvelopeParser(),
    docs=LocalSwagger(),
)
install_handlers(api)


# ---------------------------------------------------------------------------------------------
# Runs

runs = Router(tags=["runs"])


@runs.post("", response={201: RunOut, **error_responses(404, 409)})
def report_run(
    request: HttpRequest,
    payload: RunIn,
    idempotency_key: Annotated[Str255 | None, Header(alias="Idempotency-Key")] = None,
) -> Status:
    """Report one run. With an `Idempotency-Key` header, repeating the request returns the stored
    run (201 again) and never stores a second one; the same key with another body is a 409."""
    raw = EnvelopeParser.parsed(request)
    run = ingest.ingest_one(request.auth.pk, payload, raw, idempotency_key)
    return Status(201, run)


@runs.post("/batch", response={200: BatchResultOut, **error_responses()})
def report_runs(request: HttpRequest, payload: RunBatchIn) -> HttpResponse:
    """Report up to `API_MAX_BATCH` runs, each with its own `idempotency_key`. Each item is
    judged alone: `created`, `existing` (an identical earlier report, with its id) or `rejected`
    (with the reason); one bad item never loses the others."""
    limit = settings.API_MAX_BATCH
    if len(payload.runs) > limit:
        message = f"at most {limit} runs per batch"
        raise invalid(f"Too many runs: {len(payload.runs)}.", [FieldError("runs", message)])
    outcomes = ingest.ingest_batch(request.auth.pk, payload.runs)
    # Serialised directly: validating 1,000 result items against the schema again costs more
    # than the rest of the response; the schema documents the shape.
    body = {"results": [outcome.as_dict() for outcome in outcomes]}
    return HttpResponse(orjson.dumps(body), content_type="application/json")


@runs.get("", response={200: RunListOut, **error_responses()})
def list_runs(request: HttpRequest, filters: Query[RunFilters]) -> dict[str, Any]:
    """Runs newest first, filtered; pass `next_cursor` back as `cursor` for the next page."""
    after = None
    if filters.cursor:
        try:
            after = decode_cursor(filters.cursor)
        except ValueError:
            error = FieldError("cursor", "not a cursor from this API")
            raise invalid("Invalid cursor.", [error]) from None
    criteria = filters.model_dump(exclude={"cursor", "limit"})
    qs = Run.objects.filtered(**criteria)
    items, next_key = qs.keyset_page(filters.limit, after)
    return {"items": items, "next_cursor": encode_cursor(next_key) if next_key else None}


@runs.get("/{int:run_id}", response={200: RunOut, **error_responses(404)})
def get_run(request: HttpRequest, run_id: int) -> Run:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise not_found_error(f"No run with id {run_id}.")
    return run


# ---------------------------------------------------------------------------------------------
# Policies

policies = Router(tags=["policies"])


@policies.get("", response={200: PoliciesOut, **error_responses()})
def current_policies(request: HttpRequest) -> dict[str, Any]:
    """The routing policy per failure type and the enabled provider overrides, with the version
    that every decision records."""
    # Re-read the version after the rows: an edit committed in between would pair new rows
    # with an old version (the version is what decisions record), so read again until stable.
    version = PolicyState.current_version()
    while True:
        snapshot = {
            "version": version,
            "policies": [policy.snapshot() for policy in RoutingPolicy.objects.all()],
            "overrides": [o.snapshot() for o in ProviderOverride.objects.filter(enabled=True)],
        }
        latest = PolicyState.current_version()
        if latest == version:
            return snapshot
        version = latest


api.add_router("/runs", runs)
api.add_router("/policies", policies)
api.add_router("", "orchestrator.api_coordination.coordination_router")
