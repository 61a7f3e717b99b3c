"""The runs endpoints: report one run or a batch (idempotent), finish one, list them, read one.
What happens to a report or a finish is `orchestrator.ingest`'s; this module only maps HTTP onto
it."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Header, Query, Router
from ninja.responses import Status

from orchestrator import ingest, scopes
from orchestrator.analytics import export
from orchestrator.api.bodies import EnvelopeParser
from orchestrator.api.errors import (
    FieldError,
    error_responses,
    invalid,
    not_found_error,
)
from orchestrator.keyset import decode_cursor, encode_cursor
from orchestrator.models import ApiToken, Run
from orchestrator.models.run_queries import keyset_page_of
from orchestrator.schemas import (
    BatchResultOut,
    RunBatchIn,
    RunExportFilters,
    RunFilters,
    RunFinishIn,
    RunIn,
    RunListOut,
    RunOut,
    Str255,
)

router = Router(tags=["runs"])

# Set on the answer to a report whose Idempotency-Key was already stored: nothing new was stored.
REPLAYED_HEADER = "Idempotent-Replayed"


@router.post("", response={201: RunOut, **error_responses(409, body=True)})
def report_run(
    request: HttpRequest,
    response: HttpResponse,
    payload: RunIn,
    idempotency_key: Annotated[Str255 | None, Header(alias="Idempotency-Key")] = None,
) -> Status:
    """Report one run. With an `Idempotency-Key` header, repeating the request returns the stored
    run (201 again, with `Idempotent-Replayed: true`) and never stores a second one; the same key
    with another body is a 409. The output of `error_envelope()` / `success_envelope()` is
    accepted as it is, and a failure type from another vocabulary ("auth_error") is stored under
    its canonical name, with what was sent kept in `reported_failure_type`."""
    report = ingest.Report(EnvelopeParser.parsed(request), payload, idempotency_key)
    [outcome] = ingest.accept(request.auth.pk, [report], alone=True)
    if outcome.error is not None:
        raise outcome.error
    if outcome.status == "existing":
        response[REPLAYED_HEADER] = "true"
    return Status(201, outcome.run)


@router.post("/batch", response={200: BatchResultOut, **error_responses(409, body=True)})
def report_runs(request: HttpRequest, payload: RunBatchIn) -> HttpResponse:
    """Report up to `API_MAX_BATCH` runs, each with its own `idempotency_key`. Each item is
    judged alone: `created`, `existing` (an identical earlier report, with its id) or `rejected`
    (with the reason); one bad item never loses the others."""
    limit = settings.API_MAX_BATCH
    if len(payload.runs) > limit:
        message = f"at most {limit} runs per batch"
        raise invalid(f"Too many runs: {len(payload.runs)}.", [FieldError("runs", message)])
    outcomes = ingest.accept(request.auth.pk, payload.runs)
    # Not validated against the schema again (it documents the shape): that cost more than the rest.
    body = {"results": [outcome.as_dict() for outcome in outcomes]}
    return HttpResponse(orjson.dumps(body), content_type="application/json")


@router.get("", response={200: RunListOut, **error_responses(422)})
def list_runs(request: HttpRequest, filters: Query[RunFilters]) -> dict[str, Any]:
    """Runs newest first, filtered; pass `next_cursor` back as `cursor` for the next page. A
    token lists its own runs (and those of its workflows); with `read:all`, every run."""
    after = None
    if filters.cursor:
        try:
            after = decode_cursor(filters.cursor)
        except ValueError:
            error = FieldError("cursor", "not a cursor from this API")
            raise invalid("Invalid cursor.", [error]) from None
    criteria = filters.model_dump(exclude={"cursor", "limit"})
    parts = scopes.visible_parts(request.auth, Run.objects.filtered(**criteria))
    items, next_key = keyset_page_of(parts, filters.limit, after)
    return {"items": items, "next_cursor": encode_cursor(next_key) if next_key else None}


@router.get("/export", response={200: None, **error_responses(422)})
def export_runs(request: HttpRequest, filters: Query[RunExportFilters]) -> StreamingHttpResponse:
    """Every run the filters match, newest first, as CSV or JSON Lines: streamed over keyset
    pages, never loaded whole (`cursor` and `limit` are ignored). The runs the token may read,
    as `GET /runs` lists them."""
    criteria = filters.model_dump(exclude={"cursor", "limit", "format"})
    parts = scopes.visible_parts(request.auth, Run.objects.filtered(**criteria))
    lines = export.runs_export(parts, filters.format)
    response = StreamingHttpResponse(lines, content_type=export.FORMATS[filters.format])
    response["Content-Disposition"] = f'attachment; filename="runs.{filters.format}"'
    return response


@router.get("/{int:run_id}", response={200: RunOut, **error_responses(404)})
def get_run(request: HttpRequest, run_id: int) -> Run:
    """One run, of this token's own work or, with `read:all`, any (else 404)."""
    run = scopes.readable(request.auth, Run, run_id)
    if run is None:
        raise not_found_error(f"No run with id {run_id}.")
    return run


@router.patch("/{int:run_id}", response={200: RunOut, **error_responses(404, 409, body=True)})
def finish_run(request: HttpRequest, run_id: int, payload: RunFinishIn) -> Run:
    """Finish a run reported as `running`, once, with its envelope (`status` ok or error and the
    report's fields, under the same names and aliases). The same finish again returns the run;
    another outcome for a finished run, or a run the built-in coordinator runs, is a 409, and so
    is a finish after the run's running deadline (`RUN_RUNNING_TIMEOUT`, or the token's own),
    past which the sweeper finished it as a `timeout` failure. Another token's run takes
    `act:all` (else 404)."""
    return finish(request.auth, run_id, payload)


def finish(token: ApiToken, run_id: int, payload: RunFinishIn) -> Run:
    """`PATCH /runs/{run_id}` for `token`, wherever it comes from (the API, the MCP tools)."""
    run = scopes.actionable(token, Run, run_id)
    if run is None:
        raise not_found_error(f"No run with id {run_id}.")
    return ingest.finish(run, payload)
