"""The shared vocabulary, in every template's context: no status or type is typed as a literal.

Templates compare with these (`{% if item.state == ReviewState.RESOLVED %}`) and fill form values
from them (`value="{{ RunAction.RETRY }}"`), so renaming a value is one change in one enum.
"""

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
