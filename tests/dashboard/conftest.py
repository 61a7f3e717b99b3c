"""Factories for the dashboard tests: runs, workflows and review items with sensible defaults."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from orchestrator.models import ReviewItem, Run, Workflow

HOSTILE_SCRIPT = "<script>alert('pwned')</script>"
HOSTILE_IMG = '<img src=x onerror="alert(1)">'


def make_run(**fields: Any) -> Run:
    defaults: dict[str, Any] = {
        "agent": "researcher",
        "source": "web_search",
        "status": Run.Status.SUCCEEDED,
        "result_count": 3,
        "attempted": {"operation": "web_search", "query": "AI impact on film"},
    }
    defaults.update(fields)
    if defaults.get("failure_type") and "status" not in fields:
        defaults["status"] = Run.Status.FAILED
    if defaults["status"] == Run.Status.FAILED:
        defaults.setdefault("failure_type", "timeout")
        defaults["result_count"] = fields.get("result_count", 0)
    return Run.objects.create(**defaults)


def make_failure(failure_type: str = "timeout", **fields: Any) -> Run:
    fields.setdefault("detail", f"{failure_type} happened")
    return make_run(status=Run.Status.FAILED, failure_type=failure_type, **fields)


def make_review(run: Run | None = None, **fields: Any) -> ReviewItem:
    run = run or make_failure("unclassified", detail="weird error")
    fields.setdefault("reason", "unclassified after one retry")
    fields.setdefault("failure_type", run.failure_type)
    return ReviewItem.objects.create(run=run, workflow=run.workflow, **fields)


def make_workflow(**fields: Any) -> Workflow:
    fields.setdefault("name", "research AI impact")
    return Workflow.objects.create(**fields)


def ago(**delta: Any) -> Any:
    return timezone.now() - timedelta(**delta)


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator_client(operator) -> Client:
    return signed_in(operator)


@pytest.fixture
def editor_client(policy_editor) -> Client:
    return signed_in(policy_editor)


@pytest.fixture
def outsider_client(outsider) -> Client:
    return signed_in(outsider)
