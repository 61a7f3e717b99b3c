"""Spend budgets in money: a decision on a source or for an agent past its daily limit answers
the routing policy's over-budget action (escalate by default, or abort), an alert rule of kind
spend_budget fires with the budgets past it, and every change to a budget is audited."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from insights.alerts import evaluate
from insights.models import AlertDelivery, AlertRule
from orchestrator.coordination import budget, routing, spend
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import AuditEntry, RoutingPolicy, Run, SpendBudget
from orchestrator.vocabulary import Action

NOW = datetime(2025, 3, 10, 14, 30, tzinfo=UTC)
TRANSIENT = {"failure_type": "transient", "retryable": True}


@pytest.fixture(autouse=True)
def fresh(settings):
    settings.SPEND_BUDGET_CACHE_SECONDS = 0  # every decision reads the budgets and the spend
    spend.forget()
    with time_machine.travel(NOW, tick=False):
        yield
    spend.forget()


def spent(source: str, agent: str, amount: str, at: datetime = NOW, **fields) -> Run:
    return Run.objects.create(
        source=source,
        agent=agent,
        status=Run.Status.SUCCEEDED,
        cost=Decimal(amount),
        created_at=at,
        **fields,
    )


def decide(source: str = "news", agent: str = "alpha") -> routing.Decision:
    ctx = routing.Context(source=source, agent=agent)
    return budget.decide(TRANSIENT, 1, ctx, now=NOW)


def test_a_source_past_its_daily_limit_escalates_then_aborts_as_the_policy_says(db):
    SpendBudget.objects.create(scope="source", name="news", daily_limit=Decimal("0.05"))
    spent("news", "alpha", "0.03")
    spent("news", "beta", "0.019999")
    spent("news", "alpha", "9", at=NOW - timedelta(hours=15))  # yesterday (UTC): not today's
    spent("news", "alpha", "9", cost_currency="EUR")  # another currency: not this budget's
    assert decide().action == Action.RETRY  # 0.049999 of 0.05
    spent("news", "beta", "0.000001")  # exactly the limit
    decision = decide()
    assert decision.action == Action.ESCALATE and decision.budget_cost == 0
    assert "source news has spent 0.05 USD today" in decision.reason
    assert "a human decides" in decision.reason
    assert decide(source="web").action == Action.RETRY  # another source spends on

    policy = RoutingPolicy.objects.get(failure_type="transient")
    policy.over_budget_action = Action.ABORT
    save_policy_change(policy, None, note="stop spending")
    aborted = decide()
    assert aborted.action == Action.ABORT and "this task stops" in aborted.reason


def test_an_agent_past_its_limit_anywhere_and_a_disabled_budget(db):
    agent_budget = SpendBudget.objects.create(scope="agent", name="alpha", daily_limit=Decimal(1))
    spent("web", "alpha", "0.6")
    spent("news", "alpha", "0.4")
    assert decide(source="scholar", agent="alpha").action == Action.ESCALATE
    assert decide(source="scholar", agent="beta").action == Action.RETRY
    agent_budget.enabled = False
    agent_budget.save()
    assert decide(source="scholar", agent="alpha").action == Action.RETRY


def test_decisions_that_spend_nothing_stay_as_they_were(db):
    SpendBudget.objects.create(scope="source", name="news", daily_limit=Decimal(0))
    ctx = routing.Context(source="news", agent="alpha", partial_count=2)
    # A failure that said a retry cannot help, with nowhere to switch: its partial results kept.
    answered = budget.decide({"failure_type": "transient", "retryable": False}, 1, ctx, now=NOW)
    assert answered.action == Action.ACCEPT_PARTIAL


def test_the_alert_fires_with_the_budgets_past_their_limit(db):
    SpendBudget.objects.create(scope="source", name="news", daily_limit=Decimal("2"))
    SpendBudget.objects.create(scope="agent", name="beta", daily_limit=Decimal("10"))
    AlertRule.objects.create(
        name="spend", kind=AlertRule.Kind.SPEND_BUDGET, threshold=1.0, url="https://hooks.test/x"
    )
    spent("news", "alpha", "1.5")
    assert evaluate() == 0  # 75 % of the limit
    spent("news", "beta", "1")
    assert evaluate() == 1
    payload = AlertDelivery.objects.get().webhook.payload
    assert payload["kind"] == "spend_budget" and payload["value"] == 1.25
    assert payload["over_budget"] == [
        {
            "scope": "source",
            "name": "news",
            "spent_today": "2.500000",
            "daily_limit": "2.000000",
            "currency": "USD",
        }
    ]
    json.dumps(payload)  # the webhook's body


def test_every_change_is_audited(db, operator):
    b = spend.save_budget(
        SpendBudget(scope="source", name="news", daily_limit=Decimal("5")), operator
    )
    b.daily_limit = Decimal("7.5")
    spend.save_budget(b, operator, note="more")
    spend.delete_budget(b, operator)
    rows = list(AuditEntry.objects.order_by("id").values_list("action", "before", "after"))
    assert [r[0] for r in rows] == [
        "spendbudget.create",
        "spendbudget.update",
        "spendbudget.delete",
    ]
    assert rows[1][1]["daily_limit"] == "5.000000" and rows[1][2]["daily_limit"] == "7.500000"
    assert rows[2][2] == {} and not SpendBudget.objects.exists()


def test_a_run_s_decision_reads_its_agent_s_budget(db):
    from orchestrator.coordination.workflow import decide_for

    SpendBudget.objects.create(scope="agent", name="alpha", daily_limit=Decimal("0.5"))
    spent("web", "alpha", "0.5")
    failed = Run.objects.create(
        source="scholar",
        agent="alpha",
        status=Run.Status.FAILED,
        failure_type="transient",
        retryable=True,
        created_at=NOW,
    )
    decision = decide_for(None, failed)
    assert (
        decision.action == Action.ESCALATE and "agent alpha has spent 0.50 USD" in decision.reason
    )


def test_metrics_show_each_budget_s_share_spent_today(db, client, settings):
    from prometheus_client.parser import text_string_to_metric_families

    settings.METRICS_TOKEN = "scrape-me"
    SpendBudget.objects.create(scope="source", name="news", daily_limit=Decimal("4"))
    spent("news", "alpha", "3")
    body = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").content.decode()
    samples = {
        (s.name, s.labels.get("name")): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name.startswith("failsight_spend_budget")
    }
    assert samples == {
        ("failsight_spend_budget_used_ratio", "news"): 0.75,
        ("failsight_spend_budget_daily_limit", "news"): 4.0,
    }
