"""GET /runs: filters that combine, valid-empty apart from failures, and keyset pagination."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Q

from orchestrator.keyset import encode_cursor
from orchestrator.models import Run, Workflow
from tests.api.helpers import assert_envelope, error_paths

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def make_run(**fields) -> Run:
    defaults = {"agent": "researcher", "source": "web_search", "status": Run.Status.SUCCEEDED}
    return Run.objects.create(**{**defaults, **fields})


def listed(client, auth_headers, **params) -> list[int]:
    response = client.get("/api/v1/runs", params, **auth_headers)
    assert response.status_code == 200, response.content
    return [item["id"] for item in response.json()["items"]]


@pytest.fixture
def auth_headers(api_token) -> dict[str, str]:
    """These runs are the built-in coordinator's (no token): listing them takes read:all."""
    api_token[0].set_scopes(["read:all"])
    return {"HTTP_AUTHORIZATION": f"Bearer {api_token[1]}"}


@pytest.fixture
def mixed_runs(db) -> dict[str, Run]:
    workflow = Workflow.objects.create(name="research")
    return {
        "found": make_run(result_count=3, created_at=T0, topic="film", workflow=workflow),
        "empty": make_run(result_count=0, created_at=T0 + timedelta(minutes=1), topic="music"),
        "timeout": make_run(
            status=Run.Status.FAILED,
            failure_type="timeout",
            source="news_api",
            created_at=T0 + timedelta(minutes=2),
            workflow=workflow,
        ),
        "auth": make_run(
            status=Run.Status.FAILED,
            failure_type="auth_failure",
            agent="coder",
            created_at=T0 + timedelta(minutes=3),
        ),
    }


def test_it_lists_runs_newest_first(client, auth_headers, mixed_runs):
    names = ["auth", "timeout", "empty", "found"]
    assert listed(client, auth_headers) == [mixed_runs[n].pk for n in names]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"valid_empty": "true"}, ["empty"]),
        ({"valid_empty": "false"}, ["auth", "timeout", "found"]),
        ({"status": "failed"}, ["auth", "timeout"]),
        ({"status": "succeeded"}, ["empty", "found"]),
        ({"failure_type": "timeout"}, ["timeout"]),
        ({"source": "news_api"}, ["timeout"]),
        ({"agent": "coder"}, ["auth"]),
        ({"topic": "film"}, ["found"]),
        ({"since": "2025-03-01T12:01:00Z"}, ["auth", "timeout", "empty"]),
        ({"until": "2025-03-01T12:01:00+00:00"}, ["found"]),
        ({"since": "2025-03-01T12:01:00", "until": "2025-03-01T12:03:00"}, ["timeout", "empty"]),
        ({"status": "failed", "source": "web_search"}, ["auth"]),
    ],
)
def test_filters_select_the_matching_runs(client, auth_headers, mixed_runs, params, expected):
    assert listed(client, auth_headers, **params) == [mixed_runs[n].pk for n in expected]


def test_a_workflow_filter_lists_its_runs(client, auth_headers, mixed_runs):
    workflow = mixed_runs["found"].workflow_id
    expected = [mixed_runs["timeout"].pk, mixed_runs["found"].pk]
    assert listed(client, auth_headers, workflow=workflow) == expected


def test_valid_empty_and_failed_runs_never_look_alike(client, auth_headers, mixed_runs):
    items = client.get("/api/v1/runs", **auth_headers).json()["items"]
    by_id = {item["id"]: item for item in items}
    empty, failed = by_id[mixed_runs["empty"].pk], by_id[mixed_runs["timeout"].pk]
    assert (empty["status"], empty["valid_empty"], empty["failure_type"]) == (
        "succeeded",
        True,
        None,
    )
    assert (failed["status"], failed["valid_empty"], failed["failure_type"]) == (
        "failed",
        False,
        "timeout",
    )


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "exploded"}, "status"),
        ({"failure_type": "cosmic"}, "failure_type"),
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"since": "last tuesday"}, "since"),
        ({"valid_empty": "perhaps"}, "valid_empty"),
        ({"workflow": 2**64}, "workflow"),
        ({"source": "s" * 101}, "source"),
    ],
)
def test_an_invalid_filter_is_a_422_naming_it(client, auth_headers, params, field):
    response = client.get("/api/v1/runs", params, **auth_headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {field}


# ---------------------------------------------------------------------------------------------
# Keyset pagination


def walk(client, auth_headers, **params) -> list[list[int]]:
    pages, cursor = [], None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        body = client.get("/api/v1/runs", query, **auth_headers).json()
        pages.append([item["id"] for item in body["items"]])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages


def test_pages_have_no_duplicates_and_no_gaps_across_equal_timestamps(client, auth_headers, db):
    # Three bursts of runs sharing one timestamp each: pages must cut inside a burst cleanly.
    runs = [
        Run(agent="a", source="s", created_at=T0 + timedelta(seconds=burst))
        for burst in (0, 0, 0, 0, 0, 0, 0, 5, 5, 5, 5, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9)
    ]
    Run.objects.bulk_create(runs)
    pages = walk(client, auth_headers, limit=5)
    ids = [pk for page in pages for pk in page]
    expected = list(Run.objects.order_by("-created_at", "-id").values_list("pk", flat=True))
    assert ids == expected
    assert len(set(ids)) == len(runs) == 23
    assert [len(page) for page in pages] == [5, 5, 5, 5, 3]


def test_pagination_keeps_the_filters(client, auth_headers, db):
    Run.objects.bulk_create(
        Run(agent="a", source="s", status=status, created_at=T0)
        for status in [Run.Status.FAILED, Run.Status.SUCCEEDED] * 6
    )
    pages = walk(client, auth_headers, limit=4, status="failed")
    ids = [pk for page in pages for pk in page]
    assert len(ids) == 6
    assert set(Run.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"failed"}


def test_the_last_page_has_no_next_cursor(client, auth_headers, db):
    make_run(created_at=T0)
    body = client.get("/api/v1/runs", {"limit": 1}, **auth_headers).json()
    assert len(body["items"]) == 1
    assert body["next_cursor"] is None


def test_runs_created_after_the_first_page_do_not_shift_the_next(client, auth_headers, db):
    Run.objects.bulk_create(Run(agent="a", source="s", created_at=T0) for _ in range(4))
    first = client.get("/api/v1/runs", {"limit": 2}, **auth_headers).json()
    make_run(created_at=T0 + timedelta(hours=1))  # newer: belongs before page 1, not in page 2
    second = client.get(
        "/api/v1/runs", {"limit": 2, "cursor": first["next_cursor"]}, **auth_headers
    ).json()
    seen = [item["id"] for item in first["items"] + second["items"]]
    assert seen == list(
        Run.objects.filter(created_at=T0).order_by("-id").values_list("pk", flat=True)
    )


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage!",
        "bm90LWEtY3Vyc29y",  # base64 of "not-a-cursor"
        encode_cursor((datetime(2025, 1, 1), 5)),  # naive time
        encode_cursor((T0, 0)),
    ],
)
def test_a_bad_cursor_is_a_422(client, auth_headers, cursor):
    response = client.get("/api/v1/runs", {"cursor": cursor}, **auth_headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {"cursor"}


def test_named_sets_list_the_runs_the_tiles_count(client, auth_headers, mixed_runs):
    first = mixed_runs["timeout"]
    wasted = make_run(
        status=Run.Status.ESCALATED,
        failure_type="timeout",
        retry_of=first,
        attempt=2,
        created_at=T0 + timedelta(minutes=4),
    )
    recovered = make_run(
        retry_of=first, attempt=3, result_count=1, created_at=T0 + timedelta(minutes=5)
    )
    Run.objects.filter(pk=mixed_runs["auth"].pk).update(decision="escalate")
    assert listed(client, auth_headers, set="retries") == [recovered.pk, wasted.pk]
    assert listed(client, auth_headers, set="wasted_retries") == [wasted.pk]
    assert listed(client, auth_headers, set="avoided_retries") == [mixed_runs["auth"].pk]
    failures = [wasted.pk, mixed_runs["auth"].pk, first.pk]
    assert listed(client, auth_headers, set="failures") == failures
    assert listed(client, auth_headers, set="valid_empty") == [mixed_runs["empty"].pk]


def test_an_unknown_set_is_refused_with_the_valid_names(client, auth_headers, db):
    response = client.get("/api/v1/runs", {"set": "wasted"}, **auth_headers)
    body = assert_envelope(response, 422, "invalid_input")
    assert "set" in error_paths(body)
    assert "wasted_retries" in response.content.decode()


def test_a_tokens_own_list_merges_its_runs_and_its_workflows_runs_once_each(
    client, db, monkeypatch
):
    """Without read:all the list reads its runs and its workflows' runs apart (each in its own
    index order) and merges them: every own run once, newest first, across equal timestamps and
    pages, the runs it reported into its own workflow included once, nobody else's."""
    from orchestrator.analytics import export
    from orchestrator.models import ApiToken

    me, secret = ApiToken.issue("me")
    them, _ = ApiToken.issue("them")
    mine = Workflow.objects.create(name="mine", token=me)
    theirs = Workflow.objects.create(name="theirs", token=them)
    runs = []
    for i in range(24):
        # Bursts of equal timestamps across both ways a run is mine, and other runs between.
        when = T0 + timedelta(seconds=i // 4)
        token, workflow = [(me, None), (me, mine), (them, mine), (them, theirs), (them, None)][
            i % 5
        ]
        status = Run.Status.FAILED if i % 3 == 0 else Run.Status.SUCCEEDED
        fields = {"token": token, "workflow": workflow, "created_at": when, "status": status}
        runs.append(Run(agent="a", source="s", **fields))
    Run.objects.bulk_create(runs)
    own = Run.objects.filter(Q(token=me) | Q(workflow=mine)).order_by("-created_at", "-id")
    expected = list(own.values_list("pk", flat=True))
    assert len(expected) == 15
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    for limit in (1, 4, 7, 15, 50):
        pages = walk(client, headers, limit=limit)
        assert [pk for page in pages for pk in page] == expected, limit
    failed = list(own.filter(status=Run.Status.FAILED).values_list("pk", flat=True))
    assert 0 < len(failed) < len(expected)
    pages = walk(client, headers, limit=2, status="failed")
    assert [pk for page in pages for pk in page] == failed
    for batch in (1, 2, 3, 100):
        monkeypatch.setattr(export, "EXPORT_BATCH", batch)
        response = client.get("/api/v1/runs/export?format=jsonl", **headers)
        lines = b"".join(response.streaming_content)
        assert [json.loads(line)["id"] for line in lines.splitlines()] == expected, batch
