"""Failed spans of OpenTelemetry exports, kept a while so that the parts of one trace exported
in different batches make the runs one export would (`orchestrator.ingest.span_joins`)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone


class TraceSpan(models.Model):
    """A failed span as an exporter sent it, and where it went: a run of its own (`own_run`), the
    cause of another span's run, or waiting (no run yet) for `awaits`, its missing ancestor,
    until `due_at`. Kept OTLP_JOIN_KEEP_SECONDS; one row per token and span, so a re-export finds
    it instead of adding a run."""

    token_id = models.BigIntegerField()
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)
    parent_id = models.CharField(max_length=16, blank=True)
    # The span and its resource as protobuf (opentelemetry-proto), read back as they came.
    span = models.BinaryField()
    resource = models.BinaryField()
    digest = models.CharField(max_length=64)
    awaits = models.CharField(max_length=16, blank=True)
    due_at = models.DateTimeField(null=True, blank=True)
    run_id = models.BigIntegerField(null=True, blank=True)
    own_run = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # two exports of one span (a retry, two processes) keep one row
            models.UniqueConstraint(
                fields=["token_id", "trace_id", "span_id"], name="tracespan_token_span"
            ),
        ]
        indexes = [
            # an export's traces: the kept spans waiting for one of its spans
            models.Index(
                fields=["token_id", "trace_id", "awaits"],
                name="tracespan_awaits",
                condition=~Q(awaits=""),
            ),
            # the release of waiting spans whose wait is over
            models.Index(fields=["due_at"], name="tracespan_due", condition=Q(run_id__isnull=True)),
            # dropping the rows kept long enough
            models.Index(fields=["created_at"], name="tracespan_created"),
        ]

    def __str__(self) -> str:
        return f"span {self.trace_id}/{self.span_id} → run {self.run_id}"

    @property
    def waiting(self) -> bool:
        return self.run_id is None
