"""The orchestrator: the run store and everything that decides and records what happens next.

At the root: `models` (runs, workflows, policies, review items, tokens, the audit trail, with
their state transitions and named QuerySet sets), `vocabulary` (the shared enums), `admin`,
`tasks` (thin Celery tasks), `keyset` (pagination cursors) and `client` (the Python agent
client, which agents import without Django). Rooms: `coordination/` (the coordinator: routing,
budgets, dispatch, workflow steps, escalation, coverage) and `api/` (the REST API). It imports
`classifier` and never `dashboard` or `demo` (tests/test_architecture.py holds it to that).
"""
