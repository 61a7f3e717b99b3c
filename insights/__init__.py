"""What failures look like over time: run rollups (hourly, six-hour, per minute) and running
totals, failure groups, service-level objectives, alert rules and their webhooks, retention, and
the Prometheus endpoint.

Counts are folded in batches by periodic tasks (`tasks`), never per run on the ingest path. The
pages (`dashboard`) and /metrics read them here; nothing here imports the pages.
"""
