"""Switch efficacy (the matrix, its CSV, the coordinator's order of alternatives) and the retry
audit (futile retries, retryable failures that never recovered, the prefilled override)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from orchestrator.analytics import retryable
from orchestrator.coordination import efficacy
from orchestrator.coordination.registry import Registry
from orchestrator.models import Run
from orchestrator.tasks import refresh_switch_efficacy

from .conftest import make_failure, make_run


@pytest.fixture(autouse=True)
def _no_cached_matrix():
    cache.delete(efficacy.CACHE_KEY)
    yield
    cache.delete(efficacy.CACHE_KEY)


def _switch(src: str, dst: str, ok: bool, ftype: str = "timeout", partial: int = 0, wait=3.0):
    now = timezone.now()
    failed = make_failure(
        ftype, source=src, decision="switch_source", finished_at=now, partial_count=partial
    )
    status = Run.Status.SUCCEEDED if ok else Run.Status.FAILED
    fields = {"failure_type": "timeout"} if not ok else {}
    return make_run(
        source=dst,
        status=status,
        switched_from=failed,
        finished_at=now + timedelta(seconds=wait),
        **fields,
    )


def test_the_matrix_counts_each_pair_overall_and_per_type(db):
    _switch("web", "news", True, partial=2, wait=2)
    _switch("web", "news", False, wait=4)
    _switch("web", "news", True, ftype="server_fault", wait=6)
    _switch("web", "scholar", False)
    cells = efficacy.compute()
    overall = cells[("web", "news", "")]
    assert (overall.switches, overall.succeeded, overall.partial_kept) == (3, 2, 1)
    assert overall.added_latency_s == pytest.approx(4.0)
    timeout = cells[("web", "news", "timeout")]
    assert (timeout.switches, timeout.succeeded) == (2, 1)
    assert cells[("web", "scholar", "")].success_rate == 0


def test_a_switch_still_running_is_not_counted(db):
    failed = make_failure("timeout", source="web", decision="switch_source")
    make_run(source="news", status=Run.Status.RUNNING, switched_from=failed)
    assert efficacy.compute() == {}


def test_the_coordinator_orders_alternatives_by_efficacy_with_enough_data(db, settings):
    settings.SWITCH_EFFICACY_MIN_SWITCHES = 2
    for ok in (False, False):
        _switch("web", "news", ok)
    for ok in (True, True):
        _switch("web", "scholar", ok)
    assert efficacy.ranked("web", "timeout", ["news", "scholar"]) == ["news", "scholar"]
    refresh_switch_efficacy()  # the periodic task: decisions read only its cache
    reg = Registry()
    for name in ("web", "news", "scholar"):
        reg.register("search", name, lambda q, p: [])

    def prefer(untried):
        return efficacy.ranked("web", "timeout", untried)

    assert reg.switch_target("web", set(), capability="search", prefer=prefer) == (
        "scholar",
        False,
    )
    settings.SWITCH_EFFICACY_ORDERING = False  # turned off: the registry's order
    assert reg.switch_target("web", set(), capability="search", prefer=prefer)[0] == "news"


def test_without_enough_data_the_registrys_order_stands(db, settings):
    settings.SWITCH_EFFICACY_MIN_SWITCHES = 3
    _switch("web", "scholar", True)
    efficacy.refresh()
    assert efficacy.ranked("web", "timeout", ["news", "scholar"]) == ["news", "scholar"]


def test_the_matrix_page_and_its_csv(operator_client):
    _switch("web", "news", True)
    html = operator_client.get(reverse("dashboard:switch_efficacy")).content.decode()
    assert 'id="efficacy-matrix"' in html and "100 %" in html
    response = operator_client.get(reverse("dashboard:switch_efficacy"), {"format": "csv"})
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert {(r["from_source"], r["to_source"], r["failure_type"]) for r in rows} == {
        ("web", "news", "all"),
        ("web", "news", "timeout"),
    }
    bad = operator_client.get(reverse("dashboard:switch_efficacy"), {"failure_type": "nope"})
    assert bad.status_code == 400


def _task(attempts: int, ok_at_end: bool, **fields) -> Run:
    first = make_failure("server_fault", attempt=1, decision="retry", **fields)
    for n in range(2, attempts + 1):
        make_failure("server_fault", attempt=n, retry_of=first, decision="retry", **fields)
    if ok_at_end:
        make_run(retry_of=first, attempt=attempts + 1)
    return first


def test_the_audit_lists_retryable_tasks_that_never_recovered(db, settings):
    settings.RETRY_AUDIT_MIN_RETRIES = 2
    fields = dict(source="crm", retryable=True, status_code=503, signal="status")
    _task(3, ok_at_end=False, **fields)  # retried twice, never succeeded: listed
    _task(3, ok_at_end=False, **fields)
    _task(3, ok_at_end=True, **fields)  # recovered at last: not listed
    _task(2, ok_at_end=False, **fields)  # retried once only: not listed
    (row,) = retryable.never_recovered(7)
    assert (row.source, row.failure_type, row.signal, row.count) == (
        "crm",
        "server_fault",
        "status",
        2,
    )
    assert (row.match_on, row.match_value) == ("status_code", "503")


def test_the_audit_lists_retries_spent_on_non_retryable_failures(db):
    make_failure("server_fault", source="crm", retryable=False, decision="retry", status_code=501)
    make_failure("server_fault", source="crm", retryable=False, decision="abort", status_code=501)
    (row,) = retryable.futile(7)
    assert (row.source, row.count, row.match_value) == ("crm", 1, "501")


def test_the_audit_page_offers_a_prefilled_override(editor_client, operator_client):
    make_failure(
        "server_fault", source="crm", retryable=False, decision="retry", provider_code="E42"
    )
    html = editor_client.get(reverse("dashboard:retry_audit")).content.decode()
    assert "Create override" in html and "match_value=E42" in html
    assert (
        "Create override"
        not in operator_client.get(reverse("dashboard:retry_audit")).content.decode()
    )
    form = editor_client.get(
        reverse("dashboard:override_new"),
        {
            "provider": "crm",
            "match_on": "provider_code",
            "match_value": "E42",
            "retryable": "false",
        },
    ).content.decode()
    assert 'value="E42"' in form and 'value="crm"' in form


def test_the_page_reads_the_copy_beat_refreshed(operator_client):
    _switch("web", "news", True)
    efficacy.refresh()
    _switch("web", "news", False)  # after the refresh: not in the cached copy yet
    html = operator_client.get(reverse("dashboard:switch_efficacy")).content.decode()
    assert "of 1</span>" in html
    efficacy.refresh()
    html = operator_client.get(reverse("dashboard:switch_efficacy")).content.decode()
    assert "of 2</span>" in html
