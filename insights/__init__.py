"""What failures look like over time: run rollups and totals, failure groups, SLOs, alert rules,
retention and the Prometheus endpoint. The pages and /metrics read them; nothing here imports the
pages."""
