"""The WSGI entry point the Procfile's `web` line serves with gunicorn: Django's application
behind `FastReports`, which serves ordinary single run reports without Django's handler, behind
`Shedding`, which refuses requests that waited too long or whose client left before any work is
done for them."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_application = get_wsgi_application()

from orchestrator.api.fastpath import FastReports  # noqa: E402  # needs the apps loaded above
from orchestrator.api.overload import Shedding  # noqa: E402

application = Shedding(FastReports(django_application))
