"""The Celery application. Task modules live in the apps; settings come from Django's."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("failsight")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
