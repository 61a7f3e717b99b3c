"""The single-report fast path (`orchestrator.api.fastpath`) answers as Django's view would.

Each report is sent twice through the real WSGI application of `config.wsgi` (what gunicorn
calls): once with the fast path on, once with it off, and the answers are compared whole:
status, body (the run's own id, time and key aside) and header names. A spy in place of
Django's application tells which path answered. Requests the fast path must not serve (bad
token, invalid body, reused key, unknown host …) must reach Django with their body intact.

On PostgreSQL with committed transactions: outside a transaction a small group is stored with
one INSERT in autocommit, and a repeated key makes that statement fail and fall back to the
path that finds the stored run.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from config.wsgi import django_application
from orchestrator.api.fastpath import FastReports
from orchestrator.models import ApiToken, Run
from tests.api.helpers import ENVELOPE_KEYS, failed_run, ok_run
from tests.orchestrator.test_worker import database_url

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

VARYING = {"id", "created_at", "idempotency_key"}  # differ between two stored reports


class Spy:
    """Django's WSGI application, counting the requests it was handed."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        self.calls += 1
        return django_application(environ, start_response)


def post(
    app: Callable, body: Any, secret: str, key: str | None = None, close: bool = True, **extra: str
) -> tuple[int, dict[str, str], Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/v1/runs",
        "QUERY_STRING": "",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "testserver",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(data)),
        "HTTP_AUTHORIZATION": f"Bearer {secret}",
        "wsgi.input": io.BytesIO(data),
        "wsgi.url_scheme": "http",
    } | extra
    if key is not None:
        environ["HTTP_IDEMPOTENCY_KEY"] = key
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        answer["status"], answer["headers"] = int(status.split()[0]), dict(headers)

    content = b"".join(app(environ, start_response))
    if close:
        connection.close()  # as a request's end would: the thread's connection back to the pool
    is_json = answer["headers"].get("Content-Type", "").startswith("application/json")
    return answer["status"], answer["headers"], json.loads(content) if is_json else content


@pytest.fixture
def secret() -> str:
    return ApiToken.issue("fast-path")[1]


@pytest.fixture
def spy() -> Spy:
    return Spy()


@pytest.fixture
def fast(spy: Spy) -> FastReports:
    return FastReports(spy)


def insert_one(key: str) -> list:
    """One ordinary report stored straight through `inserts.insert_rows` (no request around
    it); the (id, key) it returns, empty when the key was stored already."""
    from orchestrator.api import ingest, inserts

    token = ApiToken.objects.get(name="fast-path")
    run = ingest.RunIn.model_validate(ok_run())
    return inserts.insert_rows(token.pk, [ingest._row(ingest.Pending(0, run, 1, key, "x"))])


def prepared_statements() -> int:
    """How many statements this connection has prepared on the server."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        return cursor.fetchone()[0]


def through_django(body: Any, secret: str, key: str | None = None, **extra: str) -> tuple:
    with override_settings(INGEST_FAST_PATH=False):
        return post(FastReports(django_application), body, secret, key, **extra)


@pytest.mark.parametrize(
    "body",
    [
        ok_run(),
        failed_run(failure_type="auth_error"),  # an alias: stored canonical, the alias kept
        ok_run(results=[], status_code=200),  # a valid empty result
        {"status": "running", "agent": "a", "source": "s", "attempted": {"operation": "op"}},
        failed_run(detail="<script>alert(1)</script> \u0000 nul", trace_id="ab" * 16),
    ],
    ids=["ok", "alias", "valid-empty", "running", "odd-text"],
)
def test_an_ordinary_report_is_answered_by_the_fast_path_as_django_answers_it(
    body, secret, spy, fast
):
    status, headers, answer = post(fast, body, secret, key="fast-1")
    assert spy.calls == 0  # Django's application never saw it
    django_status, django_headers, django_answer = through_django(body, secret, key="django-1")

    assert status == django_status == 201
    assert {k: v for k, v in answer.items() if k not in VARYING} == {
        k: v for k, v in django_answer.items() if k not in VARYING
    }
    assert set(headers) == set(django_headers)
    for name in set(headers) - {"Content-Length"}:
        assert headers[name] == django_headers[name], name
    stored = Run.objects.get(pk=answer["id"])
    assert (stored.idempotency_key, stored.status) == ("fast-1", answer["status"])


def test_a_repeated_report_is_the_stored_run_and_a_reused_key_is_a_409(secret, spy, fast):
    first = post(fast, ok_run(), secret, key="once")
    again = post(fast, ok_run(), secret, key="once")
    assert spy.calls == 0
    assert first[0] == again[0] == 201
    assert again[2]["id"] == first[2]["id"] and again[1]["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first[1]

    reused = post(fast, failed_run(), secret, key="once")
    assert spy.calls == 1  # a refusal is Django's to answer
    assert reused[0] == 409 and set(reused[2]) == ENVELOPE_KEYS
    assert Run.objects.filter(idempotency_key="once").count() == 1


def test_reports_without_a_key_are_each_stored(secret, spy, fast):
    ids = {post(fast, ok_run(), secret)[2]["id"] for _ in range(3)}
    assert len(ids) == 3 and spy.calls == 0
    assert Run.objects.filter(pk__in=ids).count() == 3


@pytest.mark.parametrize(
    "case",
    ["bad-token", "not-json", "invalid-run", "key-too-long", "unknown-host", "key-mismatch"],
)
def test_what_the_fast_path_does_not_serve_reaches_django_with_its_body(case, secret, spy, fast):
    body: Any = ok_run()
    key, extra, token = "k-" + case, {}, secret
    if case == "bad-token":
        token = "fs_not-a-token"
    elif case == "not-json":
        body = b'{"status": "ok",'
    elif case == "invalid-run":
        body = ok_run(status="error")  # an error without its failure_type
    elif case == "key-too-long":
        key = "k" * 256
    elif case == "unknown-host":
        extra = {"HTTP_HOST": "evil.example"}
    elif case == "key-mismatch":
        body = ok_run(idempotency_key="another")

    status, _, answer = post(fast, body, token, key, **extra)
    expected = through_django(body, token, key, **extra)

    assert spy.calls == 1
    assert status == expected[0] and status >= 400
    assert answer == expected[2]  # the same answer, so the body reached Django whole
    assert set(answer) == ENVELOPE_KEYS  # an unknown host too: never Django's HTML 400 page
    assert not Run.objects.exists()


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_a_report_over_https_gets_the_headers_django_gives_it(scheme, secret, spy):
    """The fast path's answer headers are made once per process and settings, for HTTPS and for
    plain HTTP apart: HSTS goes on the HTTPS answer only, as Django's middleware sets it."""
    https = {"HTTP_X_FORWARDED_PROTO": scheme}
    with override_settings(
        SECURE_HSTS_SECONDS=3600, SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https")
    ):
        status, headers, _ = post(FastReports(spy), ok_run(), secret, key="fast-tls", **https)
        assert spy.calls == 0
        # Django's middleware reads its settings when it is made: a handler made under them.
        with override_settings(INGEST_FAST_PATH=False):
            django = FastReports(WSGIHandler())
            _, django_headers, _ = post(django, ok_run(), secret, key="django-tls", **https)
    assert status == 201
    assert ("Strict-Transport-Security" in headers) == (scheme == "https")
    assert {k: v for k, v in headers.items() if k != "Content-Length"} == {
        k: v for k, v in django_headers.items() if k != "Content-Length"
    }


def test_a_key_claimed_meanwhile_falls_back_to_the_stored_run(secret, fast):
    """The one-statement insert fails whole on a claimed key; the fallback finds the run."""
    from orchestrator.api import ingest, inserts

    token = ApiToken.objects.get(name="fast-path")
    first = post(fast, ok_run(), secret, key="claimed")[2]["id"]
    pending = ingest.Pending(0, ingest.RunIn.model_validate(ok_run()), token.pk, "claimed", "x")
    row = ingest._row(pending)
    if connection.vendor == "postgresql":
        batch = inserts._batch_values(token.pk, timezone.now())
        assert inserts._insert_one_statement([row], batch) is None  # refused whole
    assert inserts.insert_rows(token.pk, [row]) == []  # skipped as stored
    stored = Run.objects.filter(idempotency_key="claimed").values_list("pk", flat=True)
    assert list(stored) == [first]


def test_the_one_statement_insert_is_prepared_on_its_connection(postgres, secret):
    """The single report's INSERT runs as a prepared statement on its connection (planned once,
    then executed): Django's default (prepare_threshold None) would make `prepare=True` a no-op
    and plan it on every report."""

    def prepared_runs() -> int:
        """Executions of the prepared INSERT on this connection (its plans, custom or generic)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT coalesce(sum(generic_plans + custom_plans), 0) "
                "FROM pg_prepared_statements WHERE statement LIKE "
                "'INSERT INTO \"orchestrator_run\"%%json_populate_recordset%%'"
            )
            return cursor.fetchone()[0]

    before = prepared_runs()
    for key in ("prepared-1", "prepared-2"):
        assert insert_one(key)
    assert prepared_runs() - before == 2
    assert Run.objects.filter(idempotency_key__startswith="prepared-").count() == 2


def test_a_report_is_stored_after_the_server_forgot_the_prepared_statements(postgres, secret):
    """A DEALLOCATE ALL (or a ROLLBACK, after which psycopg drops them) empties the server's
    prepared statements under the single report's prepared INSERT: the next report must still
    be stored, once."""
    for n in range(6):  # past psycopg's prepare threshold: the INSERT is prepared
        assert insert_one(f"forgot-{n}")
    assert prepared_statements() > 0
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    assert prepared_statements() == 0
    assert insert_one("forgot-after")
    keys = Run.objects.filter(idempotency_key__startswith="forgot-").values_list(
        "idempotency_key", flat=True
    )
    assert sorted(keys) == sorted([f"forgot-{n}" for n in range(6)] + ["forgot-after"])


def test_without_prepared_statements_the_insert_is_parsed_each_time(postgres, secret):
    """DATABASE_PREPARED_STATEMENTS=0 (a pooler that cannot keep them: psycopg's
    prepare_threshold None): the single report's INSERT prepares nothing on the server."""
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # what earlier tests prepared on this connection
    raw = connection.connection
    kept, raw.prepare_threshold = raw.prepare_threshold, None
    try:
        for key in ("unprepared-1", "unprepared-2"):
            assert insert_one(key)
        assert prepared_statements() == 0
    finally:
        raw.prepare_threshold = kept
    assert Run.objects.filter(idempotency_key__startswith="unprepared-").count() == 2


def test_a_connection_lost_under_the_insert_is_an_operational_error(postgres, secret):
    """The server ends the connection (a crash, a restart, an administrator): the INSERT
    raises Django's OperationalError, what the fast path answers with a 503, and the next
    report is stored on a new connection."""
    import psycopg
    from django.db import OperationalError

    assert insert_one("lost-1")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    with psycopg.connect(database_url(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    with pytest.raises(OperationalError):
        insert_one("lost-2")
    connection.close()  # as the request's end does with a connection that failed
    assert insert_one("lost-3")
    keys = Run.objects.filter(idempotency_key__startswith="lost-").values_list(
        "idempotency_key", flat=True
    )
    assert sorted(keys) == ["lost-1", "lost-3"]


def test_threads_that_end_give_their_connection_back(postgres, secret):
    """A server that starts a thread per request (`runserver`) sends each report from a new
    thread that then ends. Each one's connection is kept for a next report that never comes
    on that thread; were it never given back, the pool (10 connections) would be dry after ten
    reports and the eleventh would wait for a connection and get a 503."""
    import threading

    app = FastReports(django_application)
    pool_size = connection.pool.max_size
    statuses: list[int] = []

    def report(i: int) -> None:
        # Sent from this thread alone, which ends without closing its connection.
        statuses.append(post(app, ok_run(), secret, key=f"thread-{i}", close=False)[0])

    for i in range(pool_size + 5):
        thread = threading.Thread(target=report, args=(i,))
        thread.start()
        thread.join()
    assert statuses == [201] * (pool_size + 5)
    assert Run.objects.filter(idempotency_key__startswith="thread-").count() == pool_size + 5


@pytest.mark.parametrize(
    "body",
    [ok_run(), failed_run(failure_type="auth_error", detail="quota for key 42 exceeded")],
    ids=["ok", "failed"],
)
def test_a_stored_report_is_answered_with_the_row_as_the_database_holds_it(body, secret):
    """The answer's Run is made from what was inserted, not read back: every column of it must
    equal the row's as the database returns it, and it must be a stored instance of this
    database (as a read one is), so that saving it updates rather than inserts."""
    from orchestrator.api import ingest

    token = ApiToken.objects.get(name="fast-path")
    run, replayed = ingest.ingest_one(token.pk, ingest.RunIn.model_validate(body), body, "row-1")
    stored = Run.objects.get(pk=run.pk)
    columns = [f.attname for f in Run._meta.concrete_fields]
    assert not replayed
    assert {c: getattr(run, c) for c in columns} == {c: getattr(stored, c) for c in columns}
    assert (run._state.adding, run._state.db) == (False, stored._state.db)
    run.detail = "edited"
    run.save(update_fields=["detail"])  # an UPDATE of the stored row: no second row
    assert Run.objects.filter(idempotency_key="row-1").values_list("detail", flat=True)[0] == (
        "edited"
    )


def test_a_receiver_of_the_init_signals_sees_the_answered_run(secret):
    """The answer's instance skips Model.__init__ only while nothing listens to its signals:
    a receiver connected for Run is called for it, as for any instance Django makes."""
    from django.db.models.signals import post_init

    from orchestrator.api import ingest

    seen: list[Run] = []

    def receiver(sender: type, instance: Run, **kwargs: Any) -> None:
        seen.append(instance)

    token = ApiToken.objects.get(name="fast-path")
    post_init.connect(receiver, sender=Run)
    try:
        run, _ = ingest.ingest_one(token.pk, ingest.RunIn.model_validate(ok_run()), {}, "heard")
    finally:
        post_init.disconnect(receiver, sender=Run)
    assert seen == [run] and seen[0] is run
