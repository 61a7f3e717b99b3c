"""The Python agent client: report runs, ask for decisions, classify errors, time subagent calls.
It talks to the server over HTTP only, importing nothing of the server's.

    client = AgentClient("http://failsight:8000", token)
    with client.track("news-agent", "news_api", "search", attempted={"q": "film"}) as call:
        call.partial_results.append(first_page)      # kept if the call fails later
        call.results = fetch_everything()
"""

from orchestrator.client.api import (
    POLICY_RETRY_SECONDS,
    POLICY_VERSION_HEADER,
    REPORTED_FIELDS,
    AgentClient,
    Call,
    ClientError,
    Review,
    logger,
    report_body,
    verify_signature,
)
from orchestrator.client.background import (
    JSON_HEADERS,
    Reporter,
    ReportStats,
    Spool,
    default_spool_path,
)

__all__ = [
    "JSON_HEADERS",
    "POLICY_RETRY_SECONDS",
    "POLICY_VERSION_HEADER",
    "REPORTED_FIELDS",
    "AgentClient",
    "Call",
    "ClientError",
    "ReportStats",
    "Reporter",
    "Review",
    "Spool",
    "default_spool_path",
    "logger",
    "report_body",
    "verify_signature",
]
