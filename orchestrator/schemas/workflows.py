"""The schemas of the workflows routes: a workflow started, read, and its coverage."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from ninja import Schema
from pydantic import (
    Field,
    StringConstraints,
)

from orchestrator.schemas.common import (
    Str100,
)
from orchestrator.vocabulary import Coordinator

Topic = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class WorkflowIn(Schema):
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    goal: Annotated[str, StringConstraints(max_length=2000)] = ""
    topics: list[Topic] = Field(min_length=1, max_length=100)
    coordinator: Coordinator = Field(
        Coordinator.BUILT_IN,
        description="built_in: this product's coordinator fans out over `capability`'s "
        "registered sources and steps the workflow; external: your own coordinator reports the "
        "runs (with this workflow's id and a topic) and calls POST /workflows/{id}/finish",
    )
    capability: Str100 = Field("", description="Required for built_in; optional for external")
    breadth: int = Field(1, ge=1, le=10)
    input: dict[str, Any] = Field(default_factory=dict, description="Passed to the sources")


class WorkflowOut(Schema):
    id: int
    name: str
    status: str
    coordinator: Coordinator
    topics: list[str]
    capability: str
    breadth: int
    coverage_summary: str
    created_at: datetime
    finished_at: datetime | None
    runs: dict[str, int]
    open_reviews: int


class CoverageOut(Schema):
    workflow: int
    status: str
    final: bool
    summary: str
    coverage: dict[str, Any]
