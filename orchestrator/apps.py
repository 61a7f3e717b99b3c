"""The orchestrator app: models, the coordinator (`coordination`), the REST API (`api`), tasks."""

from django.apps import AppConfig


class OrchestratorConfig(AppConfig):
    name = "orchestrator"
    verbose_name = "Orchestration"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from orchestrator import checks  # noqa: F401  (registers the system checks)
