"""The shared vocabulary in every template's context, so no template types a status or a type as
a literal (`{% if item.state == ReviewState.RESOLVED %}`)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from orchestrator.coordination.actions import RunAction
from orchestrator.models import FailureType, ReviewItem, Run, Workflow
from orchestrator.vocabulary import Action


def vocabulary(request: HttpRequest) -> dict[str, Any]:
    return {
        "Action": Action,
        "FailureType": FailureType,
        "ReviewState": ReviewItem.State,
        "Resolution": ReviewItem.Resolution,
        "RunAction": RunAction,
        "RunStatus": Run.Status,
        "WorkflowStatus": Workflow.Status,
    }
