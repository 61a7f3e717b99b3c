"""The dashboard app's configuration: pages only, no models of its own."""

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Connects the receiver that audits sign-in lockouts; registers the pages' checks.
        from dashboard import checks, signin  # noqa: F401
