"""The operators' pages: status tiles with drill-downs, runs, workflows, the review queue, policies.

Function views with htmx fragments (`views`), counting from rollups (`stats`, `models`, `tiles`),
the runs filters (`filters`), /metrics and webhook alerts. Reads and changes go through
`orchestrator`'s models and coordination functions: no business rule lives here.
"""
