"""Project configuration: settings from the environment, root URLs, the Celery app, the broker.

Nothing else: no model, no view, no rule. The Celery app is imported here so that
`celery -A config` and Django share one configured app.
"""

from config.celery import app as celery_app

__all__ = ("celery_app",)
