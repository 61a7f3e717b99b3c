"""Django's PostgreSQL backend with pooled connections checked as `base` says."""
