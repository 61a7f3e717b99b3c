"""Usage and cost on every run: reported through POST /runs, the batch and PATCH, read back to the
micro-unit; tokens without a cost priced from the price table at the prices in effect when the run
started; a price edit reaching into the past prices its window again and nothing else; the price
table edited in the admin, versioned and audited like the policy."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from orchestrator import pricing, tasks
from orchestrator.analytics import export
from orchestrator.coordination.actions import do_restore_policy_version
from orchestrator.coordination.policy_changes import (
    delete_policy_object,
    save_policy_change,
)
from orchestrator.models import AuditEntry, OutboxMessage, PolicyState, PolicyVersion, Price, Run
from orchestrator.vocabulary import Channel
from tests.api.helpers import assert_envelope, error_paths, failed_run, ok_run, post_json

pytestmark = pytest.mark.django_db

JAN = datetime(2026, 1, 1, tzinfo=UTC)
FEB = datetime(2026, 2, 1, tzinfo=UTC)
FEB_15 = datetime(2026, 2, 15, tzinfo=UTC)
FEB_20 = datetime(2026, 2, 20, tzinfo=UTC)
MAR = datetime(2026, 3, 1, tzinfo=UTC)
APR = datetime(2026, 4, 1, tzinfo=UTC)

# 1,234 input tokens of which 200 cached, 567 output: at 2.50 / 1.25 / 10.00 per million that is
# (1,034 x 2.50 + 200 x 1.25 + 567 x 10.00) / 10^6 = 8,505 / 10^6.
USAGE = {"input_tokens": 1234, "output_tokens": 567, "cached_tokens": 200, "model": "gpt-4o"}
AT_JAN_PRICES = Decimal("0.008505")


@pytest.fixture(autouse=True)
def _prices_of_this_test_only():
    pricing.forget()
    yield
    pricing.forget()  # the table read here is rolled back with the test


def model_price(
    since: datetime = JAN, inp: str = "2.50", out: str = "10.00", cached: str | None = "1.25"
) -> Price:
    price = Price(
        kind=Price.Kind.MODEL,
        name="gpt-4o",
        effective_from=since,
        input_per_million=Decimal(inp),
        output_per_million=Decimal(out),
        cached_per_million=Decimal(cached) if cached else None,
    )
    save_policy_change(price, actor=None, note="list price")
    return price


def report(client, auth_headers, **fields):
    response = post_json(client, "/runs", ok_run(**fields), **auth_headers)
    assert response.status_code == 201, response.content
    return response.json()


def stored_cost(run_id: int) -> tuple[Decimal | None, str, str]:
    run = Run.objects.get(pk=run_id)
    return run.cost, run.cost_currency, run.cost_source


def test_a_reported_usage_and_cost_are_stored_and_read_back_to_the_micro_unit(client, auth_headers):
    body = report(client, auth_headers, usage=USAGE, cost={"amount": "0.012345", "currency": "eur"})
    assert body["usage"] == USAGE
    assert body["cost"] == {"amount": "0.012345", "currency": "EUR", "source": "reported"}
    again = client.get(f"/api/v1/runs/{body['id']}", **auth_headers).json()
    assert (again["usage"], again["cost"]) == (body["usage"], body["cost"])
    assert stored_cost(body["id"]) == (Decimal("0.012345"), "EUR", "reported")


def test_a_run_reporting_nothing_has_no_usage_and_no_cost(client, auth_headers):
    body = report(client, auth_headers)
    assert (body["usage"], body["cost"]) == (None, None)
    assert stored_cost(body["id"]) == (None, "USD", "")


def test_tokens_without_a_cost_are_priced_from_the_table_at_the_runs_start(client, auth_headers):
    model_price(JAN)
    body = report(client, auth_headers, usage=USAGE, started_at=FEB.isoformat())
    assert body["cost"] == {"amount": "0.008505", "currency": "USD", "source": "priced"}
    assert stored_cost(body["id"]) == (AT_JAN_PRICES, "USD", "priced")
    # A reported cost is the agent's word: never priced over.
    body = report(client, auth_headers, usage=USAGE, started_at=FEB.isoformat(), cost=0.5)
    assert body["cost"] == {"amount": "0.500000", "currency": "USD", "source": "reported"}


def test_a_run_started_before_any_price_or_of_an_unpriced_model_has_no_cost(client, auth_headers):
    model_price(FEB)
    before = report(client, auth_headers, usage=USAGE, started_at=JAN.isoformat())
    other = report(
        client, auth_headers, usage=USAGE | {"model": "other"}, started_at=MAR.isoformat()
    )
    assert before["cost"] is None and other["cost"] is None


def test_the_cached_price_defaults_to_the_input_price(client, auth_headers):
    model_price(JAN, cached=None)
    body = report(client, auth_headers, usage=USAGE, started_at=FEB.isoformat())
    # (1,234 x 2.50 + 567 x 10.00) / 10^6
    assert body["cost"]["amount"] == "0.008755"


def test_a_source_call_has_its_price_added_to_its_tokens(client, auth_headers):
    call = Price(kind=Price.Kind.SOURCE_CALL, name="web_search", effective_from=JAN)
    call.per_call = Decimal("0.005")
    save_policy_change(call, actor=None)
    plain = report(client, auth_headers, started_at=FEB.isoformat())
    assert plain["cost"] == {"amount": "0.005000", "currency": "USD", "source": "priced"}
    model_price(JAN)
    both = report(client, auth_headers, usage=USAGE, started_at=FEB.isoformat())
    assert both["cost"]["amount"] == str(AT_JAN_PRICES + Decimal("0.005"))


def test_a_batch_stores_usage_and_cost_and_refuses_a_bad_one_alone(client, auth_headers):
    model_price(JAN)
    runs = [
        ok_run(idempotency_key="reported", usage=USAGE, cost={"amount": 0.25, "currency": "USD"}),
        failed_run(idempotency_key="priced", usage=USAGE, started_at=FEB.isoformat()),
        ok_run(idempotency_key="negative", cost={"amount": "-0.01"}),
        ok_run(idempotency_key="currency", cost={"amount": "1", "currency": "US"}),
        ok_run(idempotency_key="huge", cost={"amount": "1e9"}),
        ok_run(idempotency_key="tokens", usage={"input_tokens": -1}),
        ok_run(idempotency_key="bare", cost="0.1234567"),
        ok_run(idempotency_key="openai", usage={"prompt_tokens": 10, "completion_tokens": 2}),
    ]
    response = post_json(client, "/runs/batch", {"runs": runs}, **auth_headers)
    results = response.json()["results"]
    assert [r["status"] for r in results] == [
        "created",
        "created",
        *["rejected"] * 4,
        "created",
        "created",
    ]
    paths = [{e["path"] for e in r["error"]["errors"]} for r in results[2:6]]
    assert paths == [
        {"runs.2.cost.amount"},
        {"runs.3.cost.currency"},
        {"runs.4.cost.amount"},
        {"runs.5.usage.input_tokens"},
    ]
    ids = [r["id"] for r in results]
    assert stored_cost(ids[0]) == (Decimal("0.25"), "USD", "reported")
    assert stored_cost(ids[1]) == (AT_JAN_PRICES, "USD", "priced")
    assert stored_cost(ids[6]) == (Decimal("0.123457"), "USD", "reported")  # half-even, micro
    openai = Run.objects.get(pk=ids[7])
    assert (openai.input_tokens, openai.output_tokens, openai.cached_tokens) == (10, 2, None)
    listed = client.get("/api/v1/runs?limit=10", **auth_headers).json()["items"]
    costs = {item["id"]: item["cost"] for item in listed}
    assert costs[ids[1]] == {"amount": "0.008505", "currency": "USD", "source": "priced"}


@pytest.mark.parametrize(
    ("cost", "path"),
    [
        ({"amount": "-1"}, "cost.amount"),
        ({"amount": "NaN"}, "cost.amount"),
        ({"amount": "1", "currency": "dollars"}, "cost.currency"),
        ({"amount": True}, "cost.amount"),
        ({"amount": "1", "extra": 1}, "cost.extra"),
    ],
)
def test_a_bad_cost_is_refused_in_our_envelope(client, auth_headers, cost, path):
    response = post_json(client, "/runs", ok_run(cost=cost), **auth_headers)
    body = assert_envelope(response, 422, "invalid_input")
    assert path in error_paths(body)
    assert not Run.objects.exists()


def test_a_finish_reports_usage_priced_at_the_runs_start(client, auth_headers):
    model_price(JAN)
    model_price(MAR, inp="5.00", out="20.00", cached="2.50")
    start = {"status": "running", "started_at": FEB.isoformat(), "usage": {"model": "gpt-4o"}}
    started = post_json(client, "/runs", start | {"agent": "a", "source": "s"}, **auth_headers)
    run_id = started.json()["id"]
    assert started.json()["cost"] is None
    finish = {"status": "ok", "results": [], "finished_at": APR.isoformat()}
    usage = {k: v for k, v in USAGE.items() if k != "model"}
    response = client.patch(
        f"/api/v1/runs/{run_id}",
        data=finish | {"usage": usage},
        content_type="application/json",
        **auth_headers,
    )
    assert response.status_code == 200, response.content
    # Priced at February's prices (its start), not April's (its finish); the model from the start.
    assert response.json()["usage"] == USAGE
    assert response.json()["cost"]["amount"] == "0.008505"
    assert stored_cost(run_id) == (AT_JAN_PRICES, "USD", "priced")


def test_a_finish_may_report_the_cost(client, auth_headers):
    start = {"status": "running", "agent": "a", "source": "s"}
    run_id = post_json(client, "/runs", start, **auth_headers).json()["id"]
    finish = {
        "status": "error",
        "failure_type": "timeout",
        "cost": {"amount": "0.3", "currency": "GBP"},
    }
    response = client.patch(
        f"/api/v1/runs/{run_id}", data=finish, content_type="application/json", **auth_headers
    )
    assert response.json()["cost"] == {
        "amount": "0.300000",
        "currency": "GBP",
        "source": "reported",
    }


def test_a_price_change_applies_from_its_effective_date_only(client, auth_headers):
    model_price(JAN)
    model_price(MAR, inp="5.00", out="20.00", cached="2.50")
    feb = report(client, auth_headers, usage=USAGE, started_at=FEB.isoformat())["id"]
    feb_20 = report(client, auth_headers, usage=USAGE, started_at=FEB_20.isoformat())["id"]
    apr = report(client, auth_headers, usage=USAGE, started_at=APR.isoformat())["id"]
    told = report(client, auth_headers, usage=USAGE, started_at=FEB_20.isoformat(), cost="1")["id"]
    assert stored_cost(feb)[0] == stored_cost(feb_20)[0] == AT_JAN_PRICES
    assert stored_cost(apr)[0] == 2 * AT_JAN_PRICES  # March's prices are twice January's

    OutboxMessage.objects.all().delete()
    # A cut on February 15th, entered afterwards: the runs from then until March change only.
    model_price(FEB_15, inp="1.00", out="4.00", cached="0.50")
    message = OutboxMessage.objects.get(task=pricing.REPRICE_TASK)
    assert message.args == ["model", "gpt-4o", FEB_15.isoformat(), MAR.isoformat()]
    assert tasks.reprice(*message.args) == 1
    # (1,034 x 1.00 + 200 x 0.50 + 567 x 4.00) / 10^6
    assert stored_cost(feb_20) == (Decimal("0.003402"), "USD", "priced")
    assert stored_cost(feb)[0] == AT_JAN_PRICES
    assert stored_cost(apr)[0] == 2 * AT_JAN_PRICES
    assert stored_cost(told) == (Decimal("1"), "USD", "reported")
    assert tasks.reprice(*message.args) == 0  # idempotent

    # A run ingested after the edit is priced by it at once.
    late = report(client, auth_headers, usage=USAGE, started_at=FEB_20.isoformat())
    assert late["cost"]["amount"] == "0.003402"


def test_moving_or_deleting_a_price_reprices_the_window_it_leaves(client, auth_headers):
    model_price(JAN)
    cut = model_price(FEB_15, inp="1.00", out="4.00", cached="0.50")
    feb_20 = report(client, auth_headers, usage=USAGE, started_at=FEB_20.isoformat())["id"]
    assert stored_cost(feb_20)[0] == Decimal("0.003402")
    OutboxMessage.objects.all().delete()
    cut.effective_from = MAR
    save_policy_change(cut, actor=None, note="the cut came later")
    args = OutboxMessage.objects.get(task=pricing.REPRICE_TASK).args
    assert args == ["model", "gpt-4o", FEB_15.isoformat(), None]
    tasks.reprice(*args)
    assert stored_cost(feb_20)[0] == AT_JAN_PRICES
    OutboxMessage.objects.all().delete()
    january = Price.objects.get(effective_from=JAN)
    delete_policy_object(january, actor=None)
    tasks.reprice(*OutboxMessage.objects.get(task=pricing.REPRICE_TASK).args)
    assert stored_cost(feb_20) == (None, "USD", "")


def test_a_price_taking_effect_later_reprices_nothing():
    OutboxMessage.objects.all().delete()
    model_price(datetime(2999, 1, 1, tzinfo=UTC))
    assert not OutboxMessage.objects.filter(task=pricing.REPRICE_TASK).exists()


def test_restoring_a_version_brings_its_prices_back_and_reprices(client, auth_headers):
    model_price(JAN)
    before = PolicyState.current_version()
    later = model_price(FEB_15, inp="1.00", out="4.00", cached="0.50")
    feb_20 = report(client, auth_headers, usage=USAGE, started_at=FEB_20.isoformat())["id"]
    OutboxMessage.objects.all().delete()
    do_restore_policy_version(before, None, channel=Channel.DASHBOARD)
    assert not Price.objects.filter(pk=later.pk).exists()
    args = OutboxMessage.objects.get(task=pricing.REPRICE_TASK).args
    assert args[:3] == ["model", "gpt-4o", FEB_15.isoformat()]
    tasks.reprice(*args)
    assert stored_cost(feb_20)[0] == AT_JAN_PRICES


def test_the_reprice_command_prices_again_what_it_names(client, auth_headers):
    feb = report(client, auth_headers, usage=USAGE, started_at=FEB.isoformat())["id"]
    assert stored_cost(feb)[0] is None
    # A row written behind the policy's back (a fixture load): the command prices from it.
    Price.objects.create(
        kind="model",
        name="gpt-4o",
        effective_from=JAN,
        input_per_million=Decimal("2.50"),
        output_per_million=Decimal("10.00"),
        cached_per_million=Decimal("1.25"),
    )
    call_command("reprice", "--model", "gpt-4o", "--since", "2026-01-31T00:00:00", stdout=None)
    assert stored_cost(feb)[0] == AT_JAN_PRICES


ADD = reverse("admin:orchestrator_price_add")


def price_form(**fields: str) -> dict[str, str]:
    return {
        "kind": "model",
        "name": "claude-sonnet",
        "effective_from_0": "2026-01-01",
        "effective_from_1": "00:00:00",
        "input_per_million": "3.00",
        "output_per_million": "15.00",
        "cached_per_million": "",
        "per_call": "",
        "currency": "USD",
        "note": "",
        **fields,
    }


def test_a_price_edited_in_the_admin_is_a_new_version_with_an_audit_row(policy_editor):
    policy_editor.is_staff = True
    policy_editor.save()
    client = Client()
    client.force_login(policy_editor)
    version = PolicyState.current_version()
    response = client.post(ADD, price_form(change_note="list price"))
    assert response.status_code == 302, response.content
    price = Price.objects.get()
    assert PolicyState.current_version() == version + 1
    entry = AuditEntry.objects.get(action="price.create")
    assert (entry.actor, entry.note, entry.after["input_per_million"]) == (
        policy_editor,
        "list price",
        "3.000000",
    )
    change = reverse("admin:orchestrator_price_change", args=[price.pk])
    response = client.post(change, price_form(output_per_million="12.00", change_note="discount"))
    assert response.status_code == 302, response.content
    assert PolicyState.current_version() == version + 2
    entry = AuditEntry.objects.get(action="price.update")
    assert (entry.before["output_per_million"], entry.after["output_per_million"]) == (
        "15.000000",
        "12.000000",
    )
    newest = PolicyVersion.objects.get(version=version + 2)
    assert [p["output_per_million"] for p in newest.prices] == ["12.000000"]
    changes = newest.changes_since(PolicyVersion.objects.get(version=version + 1))
    assert [c["what"] for c in changes] == ["price model:claude-sonnet:2026-01-01T00:00:00+00:00"]
    assert OutboxMessage.objects.filter(task=pricing.REPRICE_TASK).count() == 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"per_call": "0.01"}, "priced per token, not per call"),
        ({"input_per_million": "", "output_per_million": ""}, "needs an input or an output"),
        ({"kind": "source_call"}, "needs a price per call"),
        ({"currency": "usd"}, "ISO 4217"),
        ({"input_per_million": "-1"}, "greater than or equal to 0"),
    ],
)
def test_the_admin_refuses_a_price_that_cannot_work(admin_client, fields, message):
    response = admin_client.post(ADD, price_form(**fields))
    assert response.status_code == 200 and message in response.content.decode()
    assert not Price.objects.exists()


def test_an_operator_may_see_the_prices_but_not_change_them(operator):
    operator.is_staff = True
    operator.save()
    client = Client()
    client.force_login(operator)
    assert client.get(reverse("admin:orchestrator_price_changelist")).status_code == 200
    assert client.post(ADD, price_form()).status_code == 403


def test_the_runs_export_has_the_usage_and_cost_columns(client, auth_headers):
    model_price(JAN)
    priced = report(client, auth_headers, usage=USAGE, started_at=FEB.isoformat())["id"]
    plain = report(client, auth_headers)["id"]
    csv_text = b"".join(
        client.get("/api/v1/runs/export?format=csv", **auth_headers).streaming_content
    ).decode()
    rows = {row["id"]: row for row in csv.DictReader(io.StringIO(csv_text))}
    assert {k: rows[str(priced)][k] for k in export.RUN_COLUMNS[-7:]} == {
        "input_tokens": "1234",
        "output_tokens": "567",
        "cached_tokens": "200",
        "model": "gpt-4o",
        "cost": "0.008505",
        "cost_currency": "USD",
        "cost_source": "priced",
    }
    assert (rows[str(plain)]["cost"], rows[str(plain)]["input_tokens"]) == ("", "")
    lines = b"".join(
        client.get("/api/v1/runs/export?format=jsonl", **auth_headers).streaming_content
    ).splitlines()
    by_id = {item["id"]: item for item in map(json.loads, lines)}
    assert by_id[priced]["cost"] == "0.008505" and by_id[priced]["cached_tokens"] == 200
    assert by_id[plain]["cost"] is None


def test_the_price_table_exports_as_csv_with_each_rows_end(admin_client):
    model_price(JAN)
    model_price(MAR, inp="5.00", out="20.00", cached=None)
    call = Price(kind=Price.Kind.SOURCE_CALL, name="web_search", effective_from=JAN)
    call.per_call = Decimal("0.005")
    save_policy_change(call, actor=None)
    rest = ["1.250000", "", "USD", ""]
    changelist = reverse("admin:orchestrator_price_changelist")
    chosen = [str(p.pk) for p in Price.objects.all()]
    response = admin_client.post(changelist, {"action": "export_csv", "_selected_action": chosen})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    text = b"".join(response.streaming_content).decode()
    assert list(csv.reader(io.StringIO(text))) == [
        list(export.PRICE_COLUMNS),
        ["model", "gpt-4o", JAN.isoformat(), MAR.isoformat(), "2.500000", "10.000000", *rest],
        ["model", "gpt-4o", MAR.isoformat(), "", "5.000000", "20.000000", "", "", "USD", ""],
        ["source_call", "web_search", JAN.isoformat(), "", "", "", "", "0.005000", "USD", ""],
    ]
    # Exported alone, a row still ends where the next one of the table begins.
    january = Price.objects.get(kind="model", effective_from=JAN)
    alone = list(csv.reader(io.StringIO(b"".join(export.prices_csv([january])).decode())))
    assert alone[1][:4] == ["model", "gpt-4o", JAN.isoformat(), MAR.isoformat()]


def test_the_built_in_coordinators_runs_are_priced_per_source_call_and_token():
    model_price(JAN)
    call = Price(kind=Price.Kind.SOURCE_CALL, name="web_search", effective_from=JAN)
    call.per_call = Decimal("0.005")
    save_policy_change(call, actor=None)
    run = Run.objects.create(agent="a", source="web_search", status="running", started_at=FEB)
    envelope = {"status": "ok", "results": [1], "usage": USAGE}
    usage = pricing.usage_fields(run, USAGE, 3, FEB_20)  # a local retry: three calls
    assert run.record_outcome(envelope, FEB_20, 3, usage=usage)
    run.refresh_from_db()
    assert (run.input_tokens, run.model) == (1234, "gpt-4o")
    assert (run.cost, run.cost_source) == (AT_JAN_PRICES + 3 * Decimal("0.005"), "priced")
    bare = Run.objects.create(agent="a", source="news_api", status="running", started_at=FEB)
    usage = pricing.usage_fields(bare, None, 1, FEB_20)
    assert bare.record_outcome({"status": "ok", "results": []}, FEB_20, 1, usage=usage)
    bare.refresh_from_db()
    assert (bare.cost, bare.cost_source, bare.input_tokens) == (None, "", None)
