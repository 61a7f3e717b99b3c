"""The Python agent client: report runs, ask for decisions, classify errors, time subagent calls.

    from orchestrator.client import AgentClient

    client = AgentClient("http://failsight:8000", token)
    with client.track("news-agent", "news_api", "search", attempted={"q": "film"}) as call:
        call.partial_results.append(first_page)      # kept if the call fails later
        call.results = fetch_everything()

Two concerns, one module each: `api` is the synchronous agent API (`AgentClient`, `Review`,
`verify_signature`, `ClientError`: classified retries, the server's overrides, the run lifecycle,
human review); `background` is the reporting machinery `track` uses by default (`Reporter`, its
`Spool` and `ReportStats`, the flush at interpreter exit). `api` imports `background`, never the
reverse. Every name is importable from here, as it was from the single module this package
replaced. The package talks to the server over HTTP only: it imports `classifier`, httpx and the
standard library, nothing of the server's.
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
