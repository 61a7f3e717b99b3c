"""The coordinator: what happens after a subagent runs, one concern per module.

`workflow` advances a workflow (fan out, route each failure, apply review resolutions, settle with
coverage); `execution` runs one subagent attempt with local recovery; `dispatch` is the one place
that sends Celery tasks (after commit) and sweeps what is due; `routing` decides about one failure
(pure); `policy` caches the routing table by version; `budget` keeps per-source retry budgets and
circuit breakers; `escalation` opens review items; `review` applies overdue fallbacks and continues
a workflow once its item is resolved; `coverage` judges each topic; `registry` holds the sources;
`actions` are the operators' bulk actions on runs; `clock` is the one time source that tests and
the recovery benchmark drive; `simulation` runs all of it synchronously. Models and their
state transitions live in `orchestrator.models`, HTTP in `orchestrator.api`.
"""
