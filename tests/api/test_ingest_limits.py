"""Ingest never stores what it refuses: times Python cannot read back, integers a float would
round, and the answer for a stored run never depends on reading it back."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, OperationalError, connection, transaction
from django.urls import reverse

from orchestrator.models import Run, RunQuerySet
from orchestrator.schemas.common import MAX_DURATION_MS, REPORT_TIME_AHEAD, REPORT_TIME_PAST
from tests.api.helpers import assert_envelope, error_paths, failed_run, ok_run, post_json

API = "/api/v1"


def patch(client, path, body, headers):
    return client.patch(API + path, json.dumps(body), content_type="application/json", **headers)


def started(client, headers) -> int:
    response = post_json(client, "/runs", {"status": "running", "source": "s"}, **headers)
    assert response.status_code == 201, response.content
    return response.json()["id"]


UNREADABLE_TIMES = [
    ("started_at", "0001-01-01T00:00:00+14:00"),  # year 0 in UTC
    ("finished_at", "9999-12-31T23:59:59-14:00"),  # year 10000 in UTC
]


@pytest.mark.parametrize(("field", "value"), UNREADABLE_TIMES)
def test_a_time_outside_years_1_to_9999_in_utc_is_a_422_and_nothing_is_stored(
    client, auth_headers, field, value
):
    response = post_json(client, "/runs", ok_run(**{field: value}), **auth_headers)
    body = assert_envelope(response, 422, "invalid_input")
    assert error_paths(body) == {field}
    assert "years 1 to 9999" in body["errors"][0]["message"]
    assert Run.objects.count() == 0


@pytest.mark.parametrize(("field", "value"), UNREADABLE_TIMES)
def test_a_batch_item_with_such_a_time_is_rejected_alone(client, auth_headers, field, value):
    batch = {"runs": [ok_run(**{field: value}), ok_run()]}
    results = post_json(client, "/runs/batch", batch, **auth_headers).json()["results"]
    assert [r["status"] for r in results] == ["rejected", "created"]
    assert {e["path"] for e in results[0]["error"]["errors"]} == {f"runs.0.{field}"}
    assert Run.objects.count() == 1


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def test_the_edges_of_the_time_window_are_stored_and_listed(client, auth_headers, operator):
    now = datetime.now(UTC)
    oldest = now - REPORT_TIME_PAST + timedelta(minutes=1)
    ahead = now + REPORT_TIME_AHEAD - timedelta(minutes=1)
    report = ok_run(started_at=_iso(oldest), finished_at=_iso(ahead))
    created = post_json(client, "/runs", report, **auth_headers)
    assert created.status_code == 201, created.content
    stored = datetime.fromisoformat(created.json()["started_at"].replace("Z", "+00:00"))
    assert abs(stored - oldest) < timedelta(milliseconds=1)  # answered to the millisecond
    listed = client.get("/api/v1/runs", **auth_headers)
    assert listed.status_code == 200 and listed.json()["items"][0]["id"] == created.json()["id"]
    client.force_login(operator)
    assert client.get(reverse("dashboard:runs")).status_code == 200
    detail = reverse("dashboard:run_detail", args=[created.json()["id"]])
    assert client.get(detail).status_code == 200


def _outside_the_window() -> list[tuple[str, str]]:
    now = datetime.now(UTC)
    return [
        ("finished_at", "9999-12-31T23:59:59Z"),  # a placeholder for "never"
        ("started_at", "9999-12-31T00:00:00Z"),
        ("finished_at", _iso(now + REPORT_TIME_AHEAD + timedelta(hours=1))),
        ("started_at", _iso(now - REPORT_TIME_PAST - timedelta(days=1))),
        ("started_at", "0001-01-01T00:00:00Z"),
    ]


@pytest.mark.parametrize("index", range(5))
def test_every_time_outside_the_window_is_a_422_and_nothing_is_stored(client, auth_headers, index):
    field, value = _outside_the_window()[index]
    response = post_json(client, "/runs", ok_run(**{field: value}), **auth_headers)
    body = assert_envelope(response, 422, "invalid_input")
    assert error_paths(body) == {field}
    assert "server's clock" in body["errors"][0]["message"]
    assert Run.objects.count() == 0


@pytest.mark.parametrize("duration", [1e308, MAX_DURATION_MS * 1.01, -1])
def test_a_duration_beyond_the_windows_width_or_negative_is_a_422(client, auth_headers, duration):
    response = post_json(client, "/runs", ok_run(duration_ms=duration), **auth_headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {"duration_ms"}
    assert Run.objects.count() == 0


def test_a_duration_as_wide_as_the_window_is_stored_as_reported(client, auth_headers):
    response = post_json(client, "/runs", ok_run(duration_ms=MAX_DURATION_MS), **auth_headers)
    assert response.status_code == 201, response.content
    assert response.json()["duration_ms"] == MAX_DURATION_MS


def test_a_finish_is_held_to_the_same_window(client, auth_headers):
    run_id = started(client, auth_headers)
    outcome = {"status": "ok", "results": [], "finished_at": "9999-12-31T23:59:59Z"}
    response = patch(client, f"/runs/{run_id}", outcome, auth_headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {"finished_at"}
    response = patch(
        client, f"/runs/{run_id}", {"status": "ok", "duration_ms": 1e308}, auth_headers
    )
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {"duration_ms"}
    assert Run.objects.get(pk=run_id).status == Run.Status.RUNNING


def test_a_batch_item_outside_the_window_is_rejected_alone(client, auth_headers):
    batch = {"runs": [ok_run(finished_at="9999-12-31T23:59:59Z"), ok_run()]}
    results = post_json(client, "/runs/batch", batch, **auth_headers).json()["results"]
    assert [r["status"] for r in results] == ["rejected", "created"]
    assert {e["path"] for e in results[0]["error"]["errors"]} == {"runs.0.finished_at"}


# ---------------------------------------------------------------------------------------------
# Content types


NOT_JSON = [
    ("text/plain", "text/plain"),
    ("form", "application/x-www-form-urlencoded"),
    ("none", ""),
]


@pytest.mark.parametrize(
    ("path", "body"), [("/runs", ok_run()), ("/runs/batch", {"runs": [ok_run()]})]
)
@pytest.mark.parametrize("content_type", [c for _, c in NOT_JSON], ids=[n for n, _ in NOT_JSON])
def test_a_body_that_is_not_sent_as_json_is_a_415_and_nothing_is_stored(
    client, auth_headers, path, body, content_type
):
    response = client.post(
        f"/api/v1{path}", data=json.dumps(body), content_type=content_type, **auth_headers
    )
    answer = assert_envelope(response, 415, "invalid_input")
    assert "application/json" in answer["detail"]
    assert Run.objects.count() == 0


def test_a_finish_not_sent_as_json_is_a_415(client, auth_headers):
    run_id = started(client, auth_headers)
    response = client.patch(
        f"/api/v1/runs/{run_id}",
        json.dumps({"status": "ok"}),
        content_type="text/plain",
        **auth_headers,
    )
    assert_envelope(response, 415, "invalid_input")
    assert Run.objects.get(pk=run_id).status == Run.Status.RUNNING


@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "application/vnd.x+json"]
)
def test_json_under_its_parameters_and_suffix_is_accepted(client, auth_headers, content_type):
    response = client.post(
        "/api/v1/runs", data=json.dumps(ok_run()), content_type=content_type, **auth_headers
    )
    assert response.status_code == 201, response.content


def test_an_offset_time_is_stored_and_answered_in_utc(client, auth_headers):
    report = ok_run(started_at="2025-01-01T23:30:00-02:00", finished_at="2025-01-02T01:30:01Z")
    run = post_json(client, "/runs", report, **auth_headers).json()
    assert run["started_at"] == "2025-01-02T01:30:00Z"
    assert run["duration_ms"] == 1000.0


def test_filters_outside_the_readable_range_are_a_422(client, auth_headers):
    response = client.get("/api/v1/runs", {"since": "0001-01-01T00:00:00+14:00"}, **auth_headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {"since"}


def test_the_database_refuses_an_unreadable_time_from_any_writer(postgres):
    run = Run.objects.create(agent="a", source="s", status="succeeded")
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE orchestrator_run SET started_at = '0001-01-01 00:00:00+14' WHERE id = %s",
            [run.pk],
        )


# ---------------------------------------------------------------------------------------------
# Integers


EXACT = {"just_past_a_double": 2**53 + 1, "largest": 2**64 - 1, "smallest": -(2**63)}


def test_integers_a_double_cannot_hold_are_kept_exactly(client, auth_headers):
    report = ok_run(attempted={"operation": "lookup", **EXACT}, results=[{"id": 2**63 + 7}])
    created = post_json(client, "/runs", report, **auth_headers)
    assert created.status_code == 201, created.content
    fetched = client.get(f"/api/v1/runs/{created.json()['id']}", **auth_headers)
    for answer in (created, fetched):
        body = json.loads(answer.content)  # the standard library keeps integers exact
        assert {k: body["attempted"][k] for k in EXACT} == EXACT
        assert body["results"] == [{"id": 2**63 + 7}]
    stored = Run.objects.get()
    assert stored.attempted["just_past_a_double"] == 2**53 + 1


@pytest.mark.parametrize(
    ("report", "path"),
    [
        (ok_run(attempted={"id": 2**64}), "attempted.id"),
        (ok_run(results=[{"n": 1}, {"n": -(2**63) - 1}]), "results.1.n"),
        (failed_run(partial_results=[{"big": 10**40}]), "partial_results.0.big"),
    ],
)
def test_an_integer_wider_than_64_bits_is_refused_never_rounded(client, auth_headers, report, path):
    response = post_json(client, "/runs", report, **auth_headers)
    body = assert_envelope(response, 422, "invalid_input")
    assert error_paths(body) == {path}
    assert "send it as a string" in body["errors"][0]["message"]
    assert Run.objects.count() == 0


@pytest.mark.parametrize("digits", [400, 5000])  # beyond any double; beyond int() by default
def test_an_integer_of_hundreds_of_digits_is_refused_too(client, auth_headers, digits):
    text = json.dumps(ok_run(attempted={"id": "N"})).replace('"N"', "9" * digits)
    response = post_json(client, "/runs", text, **auth_headers)
    path = "attempted.id" if digits < 4300 else ""  # past int()'s limit the path is unknown
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {path}
    assert Run.objects.count() == 0


def test_a_wide_integer_in_a_batch_names_its_item(client, auth_headers):
    batch = {"runs": [ok_run(), ok_run(attempted={"id": 2**70})]}
    response = post_json(client, "/runs/batch", batch, **auth_headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {"runs.1.attempted.id"}


def test_long_digit_strings_are_not_numbers(client, auth_headers):
    report = ok_run(attempted={"operation": "lookup", "id": "1" * 40})
    assert post_json(client, "/runs", report, **auth_headers).status_code == 201


# ---------------------------------------------------------------------------------------------
# The answer for a stored run


def test_a_stored_report_is_answered_without_reading_it_back(client, auth_headers, monkeypatch):
    """A read after the commit that fails (the database going away) must not turn a stored
    report into an error its sender would resend; a replay, which must read, answers 503."""

    def unreachable(self, *args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(RunQuerySet, "get", unreachable)
    headers = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "no-read-back"}
    created = post_json(client, "/runs", failed_run(), **headers)
    assert created.status_code == 201, created.content
    assert Run.objects.filter(pk=created.json()["id"]).exists()
    replay = post_json(client, "/runs", failed_run(), **headers)
    assert_envelope(replay, 503, "server_fault")
    monkeypatch.undo()
    fetched = client.get(f"/api/v1/runs/{created.json()['id']}", **auth_headers)
    assert fetched.json() == created.json()  # the answer was exactly the stored row
