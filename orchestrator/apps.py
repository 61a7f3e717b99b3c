"""The orchestrator app: models, the coordinator (`coordination`), the REST API (`api`), tasks."""

from django.apps import AppConfig


class OrchestratorConfig(AppConfig):
    name = "orchestrator"
    verbose_name = "Orchestration"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the system checks, and connects a worker's pulse to Celery's worker signals
        # (sent only in workers).
        from orchestrator import checks, liveness  # noqa: F401
