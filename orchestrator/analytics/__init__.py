"""Analytics over the stored runs that no single page's counts give: what a proposed routing table
would have done with the last days' failures (`dryrun`), how often switching from one source to
another worked (`efficacy` in `orchestrator.coordination`, which the coordinator reads too), where
the retry signal was wrong (`retryable`), service-level objectives and their burn rates (`slo`),
and the exports of runs lists and tables (`export`).

Each module reads the database through a few bounded aggregate queries and hands plain rows to
pure functions, so the figures are testable against a hand-built history; pages and endpoints
live in `dashboard` and `orchestrator.api`.
"""
