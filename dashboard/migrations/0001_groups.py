"""Seed the two operator groups: `operators` (view, review) and `policy editors` (also edit policies)."""

from django.db import migrations

VIEW = [
    "view_workflow",
    "view_run",
    "view_reviewitem",
    "view_routingpolicy",
    "view_provideroverride",
    "view_sourcehealth",
    "view_auditentry",
]
OPERATORS = [*VIEW, "review"]
POLICY_EDITORS = [
    *OPERATORS,
    "edit_policies",
    "change_routingpolicy",
    "add_provideroverride",
    "change_provideroverride",
    "delete_provideroverride",
    "change_sourcehealth",
]


def seed_groups(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after migrate; this migration needs them now.
    for config in apps.get_app_configs():
        config.models_module = True
        create_permissions(config, verbosity=0, apps=apps)
        config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in (("operators", OPERATORS), ("policy editors", POLICY_EDITORS)):
        group, _ = Group.objects.get_or_create(name=name)
        perms = Permission.objects.filter(
            content_type__app_label="orchestrator", codename__in=codenames
        )
        group.permissions.set(perms)


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0002_seed_policies"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(seed_groups, migrations.RunPython.noop)]
