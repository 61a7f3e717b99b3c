"""Ingest: the one way reports become runs. Every way in (REST single and batch, PATCH, OTLP, MCP)
hands its reports to `accept` and its finishes to `finish`; the steps they take are listed in
`orchestrator.ingest.pipeline`.

    outcomes = accept(token.pk, [body, ...])             # a batch: one Outcome per report
    [outcome] = accept(token.pk, [Report(body, key=k)], alone=True)  # outcome.run: the Run
    run = finish(run, RunFinishIn.model_validate(body))  # raises ApiError (409, 422)
    settle()  # before reading a source's health: this process's reports have reached it
"""

from __future__ import annotations

from orchestrator.ingest.pipeline import Outcome, Report, accept, finish
from orchestrator.ingest.sources import settle

__all__ = ["Outcome", "Report", "accept", "finish", "settle"]
