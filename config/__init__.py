"""Project configuration. The Celery app is imported here so that `celery -A config` and Django
share one configured app."""

from config.celery import app as celery_app

__all__ = ("celery_app",)
