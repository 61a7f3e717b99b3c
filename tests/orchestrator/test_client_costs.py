"""The Python client reports what its calls used and cost, against the real app served by a live
server: a provider's response object read as the run's usage, a failing call's usage from the
exception the SDK raised, a finish's usage and cost, a report's; priced where no cost is said."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion

from orchestrator import pricing
from orchestrator.client import AgentClient
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import ApiToken, Price, Run

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-2024-08-06",
    "choices": [],
    "usage": {
        "prompt_tokens": 1234,
        "completion_tokens": 567,
        "total_tokens": 1801,
        "prompt_tokens_details": {"cached_tokens": 200},
    },
}


@pytest.fixture
def agent(live_server):
    pricing.forget()
    price = Price(
        kind="model", name="gpt-4o-2024-08-06", effective_from=datetime(2020, 1, 1, tzinfo=UTC)
    )
    price.input_per_million, price.output_per_million = Decimal("2.50"), Decimal("10.00")
    price.cached_per_million = Decimal("1.25")
    save_policy_change(price, actor=None)
    _, secret = ApiToken.issue("client-costs")
    with AgentClient(live_server.url, secret, sleep=lambda s: None, strict=True) as client:
        yield client
    pricing.forget()


def test_a_tracked_call_reports_the_usage_of_the_providers_response(agent):
    with agent.track("writer", "openai", "chat") as call:
        call.usage = ChatCompletion.model_validate(COMPLETION)
        call.results = ["a draft"]
    run = Run.objects.get(pk=call.run["id"])
    assert (run.input_tokens, run.output_tokens, run.cached_tokens) == (1234, 567, 200)
    assert run.model == "gpt-4o-2024-08-06"
    # (1,034 x 2.50 + 200 x 1.25 + 567 x 10.00) / 10^6
    assert (run.cost, run.cost_source) == (Decimal("0.008505"), "priced")
    assert call.run["cost"] == {"amount": "0.008505", "currency": "USD", "source": "priced"}


def test_a_failing_call_reports_the_usage_its_exception_carries(agent):
    request = httpx.Request("POST", "https://api.openai.com/v1/chat/completions")
    body = {"error": {"message": "overloaded"}} | {k: COMPLETION[k] for k in ("model", "usage")}
    error = openai.InternalServerError(
        "overloaded", response=httpx.Response(500, request=request), body=body
    )
    with pytest.raises(openai.InternalServerError), agent.track("writer", "openai") as call:
        raise error
    run = Run.objects.get(pk=call.run["id"])
    assert (run.status, run.failure_type) == ("failed", "server_fault")
    assert (run.input_tokens, run.cost) == (1234, Decimal("0.008505"))


def test_a_finish_and_a_report_carry_usage_and_cost(agent):
    started = agent.start("writer", "openai", "chat")
    usage = {"input_tokens": 10, "output_tokens": 2, "model": "gpt-4o-2024-08-06"}
    done = agent.finish(
        started["id"], {"status": "ok", "results": []}, usage=usage, cost=Decimal("0.25")
    )
    assert done["usage"] == usage | {"cached_tokens": None}
    assert done["cost"] == {"amount": "0.250000", "currency": "USD", "source": "reported"}
    reported = agent.report(
        {"status": "ok", "results": []},
        agent="writer",
        source="openai",
        usage=usage,
        cost={"amount": "1.5", "currency": "EUR"},
    )
    assert Run.objects.get(pk=reported["id"]).cost == Decimal("1.5")
    assert reported["cost"]["currency"] == "EUR"
