"""The System page (staff): Celery's workers and queues, the outbox, the runs' leases, beat, the
failing webhook deliveries and the database, each line with a link to where it is fixed."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.access import staff_required
from dashboard.views.common import poll_seconds, wants_fragment
from insights import system as lines
from orchestrator import workers
from orchestrator.api.overload import idle


@staff_required
@require_GET
def system(request: HttpRequest) -> HttpResponse:
    """`listen=1` hears the workers for one heartbeat interval and a margin (the request's
    slot serves others meanwhile); without it, the page shows what the last listen heard and
    listens from the browser at once."""
    listen = request.GET.get("listen") == "1"
    with idle(request.environ) as may_wait:
        broker = lines.broker(listen=listen and may_wait)
    now = timezone.now()
    context = {
        "broker": broker,
        "listen": listen,
        "outbox": lines.outbox(),
        "leases": lines.leases(now),
        "beat": lines.beat(now),
        "webhooks": lines.webhooks(now),
        "database": lines.database(),
        "listen_seconds": workers.LISTEN_SECONDS,
        "heartbeat_margin": workers.HEARTBEAT_MARGIN,
        "lease_seconds": settings.RUN_LEASE_SECONDS,
        "max_wait_seconds": settings.WORKER_MAX_WAIT_SECONDS,
        "outbox_resend_seconds": settings.OUTBOX_RESEND_SECONDS,
        "beat_record_seconds": settings.BEAT_TICK_RECORD_SECONDS,
        "poll_seconds": poll_seconds(),
        "now": now,
    }
    template = "dashboard/system.html#lines" if wants_fragment(request) else "dashboard/system.html"
    return render(request, template, context)
