"""Tables the run table's PostgreSQL triggers write: a run's unique claims (`RunKey`) and the
workflows' run counts (`WorkflowCounter`, folded from `WorkflowRunDelta`). Unused on SQLite."""

from __future__ import annotations

from django.db import models


class RunKey(models.Model):
    """One unique claim of a run on PostgreSQL, where the run table is partitioned (see `Run`):
    `i:<token id>:<idempotency key>`, `s:<slot>` or `r:<first attempt>:<attempt>`, written by a
    trigger in the inserting statement, so a second claim fails it with a unique violation."""

    # Looked up by equality only: migration 0017 drops the LIKE index Django built beside it
    # (a schema change to this field would build it again: drop it again).
    key = models.CharField(max_length=400, primary_key=True)
    run_id = models.BigIntegerField()
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.key} → run {self.run_id}"


class WorkflowCounter(models.Model):
    """A workflow's runs and failures folded from `WorkflowRunDelta`, read by the workflows list."""

    # Not a foreign key: a deleted workflow's counter goes with the fold, not with a cascade
    # that would race the triggers writing its runs' last deltas.
    workflow_id = models.BigIntegerField(primary_key=True)
    runs = models.BigIntegerField(default=0)
    failures = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"workflow {self.workflow_id}: {self.runs} runs, {self.failures} failures"


class WorkflowRunDelta(models.Model):
    """A change of a workflow's counts, appended by the run table's triggers in the writer's own
    transaction (inserts never conflict); folded into `WorkflowCounter` by a periodic task."""

    workflow_id = models.BigIntegerField()
    runs = models.BigIntegerField(default=0)
    failures = models.BigIntegerField(default=0)

    class Meta:
        indexes = [
            # the workflows list adds each listed workflow's pending deltas to its counter
            models.Index(fields=["workflow_id"], name="workflowrundelta_workflow"),
        ]

    def __str__(self) -> str:
        return f"workflow {self.workflow_id}: {self.runs:+} runs, {self.failures:+} failures"
