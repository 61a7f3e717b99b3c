"""The operators' pages: status tiles with drill-downs, runs, workflows, failure groups, the
review queue, policies and analytics.

Function views with htmx fragments (`views`), the tiles' links and labels (`tiles`), the
query-string filters (`filters`, `groups`, `queue`). Counts come from `insights`; reads and
changes go through `orchestrator`'s models and coordination functions: no business rule lives
here, and nothing else imports this package.
"""
