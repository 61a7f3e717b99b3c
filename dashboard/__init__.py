"""The operators' pages: tiles with drill-downs, runs, workflows, failure groups, the review queue,
policies and analytics. Counts come from `insights`, changes go through `orchestrator`: no business
rule lives here, and nothing else imports this package."""
