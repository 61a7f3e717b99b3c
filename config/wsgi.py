"""The WSGI entry point the web server serves (`config.serve`): Django's application behind
`Admission`, which lets a process work on WEB_THREADS requests at once and answers the excess
with a fast 503 instead of queueing it, and `ChunkedBodies`, which hands on a chunked API body
with its length."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_application = get_wsgi_application()

from config import serve  # noqa: E402  # reads the settings module configured above
from orchestrator.api.errors import ChunkedBodies  # noqa: E402  # needs the apps loaded above
from orchestrator.api.overload import Admission  # noqa: E402

_serving = serve.from_env()
application = Admission(
    ChunkedBodies(django_application),
    slots=_serving.threads,
    queue_ms=_serving.queue_ms,
    waiting=_serving.waiting,
    idling=_serving.long_polls,
)
