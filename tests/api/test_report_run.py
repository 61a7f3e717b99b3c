"""POST /runs stores one envelope as a run, idempotently; GET /runs/{id} reads it back."""

from __future__ import annotations

import json

from orchestrator.models import Run, Workflow
from tests.api.helpers import assert_envelope, error_paths, failed_run, ok_run, post_json


def test_an_ok_report_round_trips_as_a_succeeded_run(client, api_token, auth_headers):
    response = post_json(client, "/runs", ok_run(topic="film", attempt=1), **auth_headers)
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["status"] == "succeeded"
    assert created["result_count"] == 1
    assert created["valid_empty"] is False
    assert created["operation"] == "web_search"  # taken from attempted.operation

    fetched = client.get(f"/api/v1/runs/{created['id']}", **auth_headers)
    assert fetched.status_code == 200
    assert fetched.json() == created
    assert Run.objects.get().token == api_token[0]


def test_an_error_report_keeps_the_whole_envelope(client, auth_headers):
    report = failed_run(
        status_code=504, provider_code="GatewayTimeout", exception_type="ReadTimeout"
    )
    response = post_json(client, "/runs", report, **auth_headers)
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["status"] == "failed"
    assert run["failure_type"] == "timeout"
    assert run["retryable"] is True
    assert run["retry_after"] == 2.0
    assert run["partial_results"] == report["partial_results"]
    assert run["partial_count"] == 1
    assert run["alternatives"] == report["alternatives"]
    assert run["chain"] == report["chain"]
    assert run["detail"] == report["detail"]
    assert run["attempted"] == report["attempted"]
    assert run["status_code"] == 504


def test_an_empty_success_is_stored_as_valid_empty_not_as_a_failure(client, auth_headers):
    response = post_json(client, "/runs", ok_run(results=[]), **auth_headers)
    assert response.status_code == 201
    assert response.json()["status"] == "succeeded"
    assert response.json()["valid_empty"] is True
    assert Run.objects.valid_empty().count() == 1
    assert Run.objects.failed().count() == 0


def test_it_derives_the_duration_from_the_timestamps(client, auth_headers):
    report = ok_run(started_at="2025-01-01T10:00:00Z", finished_at="2025-01-01T10:00:01.5+00:00")
    response = post_json(client, "/runs", report, **auth_headers)
    assert response.json()["duration_ms"] == 1500.0


def test_a_run_can_belong_to_a_workflow_and_retry_an_earlier_run(client, auth_headers, api_token):
    workflow = Workflow.objects.create(name="research", token=api_token[0])
    first = post_json(client, "/runs", failed_run(workflow=workflow.pk), **auth_headers).json()
    retry = ok_run(workflow=workflow.pk, retry_of=first["id"], attempt=2)
    response = post_json(client, "/runs", retry, **auth_headers)
    assert response.status_code == 201, response.content
    assert response.json()["retry_of"] == first["id"]
    assert response.json()["workflow"] == workflow.pk


def test_an_unknown_workflow_or_first_attempt_is_a_422_naming_the_field(client, auth_headers):
    response = post_json(client, "/runs", ok_run(workflow=999, retry_of=998), **auth_headers)
    body = assert_envelope(response, 422, "invalid_input")
    assert error_paths(body) == {"workflow", "retry_of"}
    assert Run.objects.count() == 0


def test_an_error_without_a_failure_type_is_refused(client, auth_headers):
    response = post_json(client, "/runs", failed_run(failure_type=None), **auth_headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {"failure_type"}


def test_an_ok_report_with_a_failure_type_is_refused(client, auth_headers):
    response = post_json(client, "/runs", ok_run(failure_type="timeout"), **auth_headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {"failure_type"}


def test_results_and_partial_results_belong_to_their_own_status(client, auth_headers):
    bad_ok = ok_run(partial_results=[{"url": "x"}])
    bad_error = failed_run(results=[{"url": "x"}])
    first = assert_envelope(
        post_json(client, "/runs", bad_ok, **auth_headers), 422, "invalid_input"
    )
    second = assert_envelope(
        post_json(client, "/runs", bad_error, **auth_headers), 422, "invalid_input"
    )
    assert error_paths(first) == {"partial_results"}
    assert error_paths(second) == {"results"}


def test_a_finish_before_the_start_is_refused(client, auth_headers):
    report = ok_run(started_at="2025-01-01T10:00:00Z", finished_at="2025-01-01T09:00:00Z")
    body = assert_envelope(post_json(client, "/runs", report, **auth_headers), 422, "invalid_input")
    assert error_paths(body) == {"finished_at"}


def test_an_unknown_field_is_refused_rather_than_silently_dropped(client, auth_headers):
    response = post_json(client, "/runs", ok_run(failure_typ="timeout"), **auth_headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {"failure_typ"}


def test_an_unknown_run_is_a_404_envelope(client, auth_headers):
    body = assert_envelope(
        client.get("/api/v1/runs/424242", **auth_headers), 404, "resource_missing"
    )
    assert body["retryable"] is False


def test_an_id_beyond_any_integer_column_is_a_404_not_a_500(client, auth_headers):
    response = client.get(f"/api/v1/runs/{10**30}", **auth_headers)
    assert_envelope(response, 404, "resource_missing")


# ---------------------------------------------------------------------------------------------
# Idempotency


def test_repeating_a_report_with_its_key_returns_the_stored_run_and_stores_nothing(
    client, auth_headers
):
    headers = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "report-1"}
    first = post_json(client, "/runs", failed_run(), **headers)
    second = post_json(client, "/runs", failed_run(), **headers)
    assert first.status_code == second.status_code == 201
    assert second.json() == first.json()
    assert Run.objects.count() == 1
    assert Run.objects.get().idempotency_key == "report-1"
    assert len(Run.objects.get().request_hash) == 64


def test_the_same_json_in_another_layout_counts_as_the_same_report(client, auth_headers):
    headers = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "report-2"}
    first = json.dumps(ok_run(started_at="2025-01-01T10:00:00Z"))
    # The same data: keys in another order, other whitespace.
    second = json.dumps(dict(reversed(list(json.loads(first).items()))), indent=4)
    assert post_json(client, "/runs", first, **headers).status_code == 201
    assert post_json(client, "/runs", second, **headers).status_code == 201
    assert Run.objects.count() == 1


def test_reusing_a_key_for_a_different_body_is_a_409(client, auth_headers):
    headers = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "report-3"}
    stored = post_json(client, "/runs", ok_run(), **headers).json()
    response = post_json(client, "/runs", ok_run(topic="music"), **headers)
    body = assert_envelope(response, 409, "invalid_input")
    assert str(stored["id"]) in body["detail"]
    assert body["alternatives"]
    assert Run.objects.count() == 1


def test_keys_are_scoped_per_token(client, auth_headers):
    from orchestrator.models import ApiToken

    _, other_secret = ApiToken.issue("other-agent")
    other = {"HTTP_AUTHORIZATION": f"Bearer {other_secret}", "HTTP_IDEMPOTENCY_KEY": "shared"}
    mine = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "shared"}
    assert post_json(client, "/runs", ok_run(), **mine).status_code == 201
    assert post_json(client, "/runs", ok_run(topic="x"), **other).status_code == 201
    assert Run.objects.count() == 2


def test_the_key_may_come_in_the_body_but_must_agree_with_the_header(client, auth_headers):
    in_body = post_json(client, "/runs", ok_run(idempotency_key="body-key"), **auth_headers)
    assert in_body.json()["idempotency_key"] == "body-key"
    headers = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "header-key"}
    response = post_json(client, "/runs", ok_run(idempotency_key="body-key"), **headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {"idempotency_key"}


def test_an_idempotency_key_longer_than_its_column_is_refused(client, auth_headers):
    headers = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "k" * 256}
    response = post_json(client, "/runs", ok_run(), **headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {"Idempotency-Key"}


def test_a_run_may_name_its_opentelemetry_trace_and_span(client, auth_headers, settings):
    settings.TRACE_URL_TEMPLATE = "https://tempo.example/trace/{trace_id}"
    trace, span = "4BF92F3577B34DA6A3CE929D0E0E4736", "00f067aa0ba902b7"
    response = post_json(client, "/runs", ok_run(trace_id=trace, span_id=span), **auth_headers)
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["trace_id"], body["span_id"]) == (trace.lower(), span)
    assert body["trace_url"] == f"https://tempo.example/trace/{trace.lower()}"
    assert post_json(client, "/runs", ok_run(), **auth_headers).json()["trace_url"] is None


def test_a_span_without_its_trace_or_an_invalid_id_is_refused(client, auth_headers):
    for fields, path in (
        ({"span_id": "00f067aa0ba902b7"}, "span_id"),
        ({"trace_id": "0" * 32}, "trace_id"),
        ({"trace_id": "4bf92f3577b34da6a3ce929d0e0e47"}, "trace_id"),
        ({"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "xyz"}, "span_id"),
    ):
        response = post_json(client, "/runs", ok_run(**fields), **auth_headers)
        assert path in error_paths(assert_envelope(response, 422, "invalid_input")), fields
    assert not Run.objects.exists()


def test_a_report_giving_only_its_duration_finished_when_it_arrived(client, auth_headers):
    # The SDK's track() sends the duration and no times: the run page must not say
    # Started "—", Finished "—" beside "Duration 252 ms".
    from django.utils import timezone

    before = timezone.now()
    report = ok_run(duration_ms=252)
    report.pop("started_at", None)
    report.pop("finished_at", None)
    response = post_json(client, "/runs", report, **auth_headers)
    run = Run.objects.get(pk=response.json()["id"])
    assert run.finished_at is not None and before <= run.finished_at <= timezone.now()
    assert (run.finished_at - run.started_at).total_seconds() * 1000 == 252
    assert run.duration_ms == 252
