"""Auth failures whose refresh did not help (or that have none) switch to another source and ask
a person to repair the failing one, instead of holding the work until someone answers: the
seeded row's action when exhausted becomes switch_and_escalate. Only rows still on the seeded
`escalate` change; an operator's other choice stays. Work with no other source still waits
(routing degrades the switch to an escalation)."""

from django.db import migrations


def switch_and_escalate(apps, schema_editor):
    for name in ("RoutingPolicy", "ProjectPolicy"):
        model = apps.get_model("orchestrator", name)
        rows = model.objects.filter(failure_type="auth_failure", action_when_exhausted="escalate")
        rows.update(action_when_exhausted="switch_and_escalate")


def escalate(apps, schema_editor):
    for name in ("RoutingPolicy", "ProjectPolicy"):
        model = apps.get_model("orchestrator", name)
        rows = model.objects.filter(
            failure_type="auth_failure", action_when_exhausted="switch_and_escalate"
        )
        rows.update(action_when_exhausted="escalate")


class Migration(migrations.Migration):
    dependencies = [("orchestrator", "0037_refresh_credentials")]

    operations = [migrations.RunPython(switch_and_escalate, escalate)]
