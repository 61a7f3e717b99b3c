"""Refusals: what the product answers when it will not take a request, as data the API's error
envelope is written from (`orchestrator.api.errors`). Raised by the API's routers and by the ingest
pipeline alike, so that the pipeline needs nothing of the API to say why a report was refused."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.vocabulary import FailureCategory


@dataclass(frozen=True, slots=True)
class FieldError:
    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class ApiError(Exception):
    """An error answer in the envelope shape; raise it anywhere under the API or in ingest."""

    def __init__(
        self,
        status: int,
        failure_type: FailureCategory,
        detail: str,
        *,
        errors: Iterable[FieldError] = (),
        retry_after: float | None = None,
        alternatives: Iterable[str] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.failure_type = failure_type
        self.detail = detail
        self.errors = list(errors)
        self.retry_after = retry_after
        self.alternatives = list(alternatives)
        self.headers = headers or {}


def invalid(detail: str, errors: Iterable[FieldError] = (), status: int = 422) -> ApiError:
    return ApiError(
        status,
        FailureCategory.INVALID_INPUT,
        detail,
        errors=errors,
        alternatives=["fix the request as the errors say; repeating it unchanged cannot succeed"],
    )
