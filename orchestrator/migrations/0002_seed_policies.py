"""Seed the routing table and provider overrides with the product's defaults (docs/operations.md: routing)."""

from django.db import migrations

# failure_type: (max_attempts, base_delay, max_delay, multiplier, jitter, exhausted, hard_fail,
#                review_deadline seconds, review_fallback)
DEFAULT_POLICIES = {
    # retry with exponential backoff + jitter, then try the next source
    "transient": (4, 1.0, 30.0, 2.0, "full", "switch_source", False, 4 * 3600, "accept_partial"),
    # never sooner than Retry-After; a wait beyond max_delay escalates
    "rate_limited": (
        4,
        2.0,
        120.0,
        2.0,
        "full",
        "switch_source",
        False,
        4 * 3600,
        "accept_partial",
    ),
    # no blind retry: refresh credentials once if possible, else a human decides
    "auth_failure": (1, 0.0, 0.0, 1.0, "none", "escalate", True, 24 * 3600, "accept_partial"),
    # no retry: switch source, or record a gap
    "resource_missing": (
        1,
        0.0,
        0.0,
        1.0,
        "none",
        "switch_source",
        True,
        24 * 3600,
        "accept_partial",
    ),
    # no retry: fail with the reason
    "invalid_input": (1, 0.0, 0.0, 1.0, "none", "abort", True, 24 * 3600, "abort"),
    # retry, fewer times, longer backoff
    "timeout": (3, 2.0, 60.0, 3.0, "full", "switch_source", False, 4 * 3600, "accept_partial"),
    # retry with backoff (Retry-After honoured on 503)
    "server_fault": (4, 1.0, 60.0, 2.0, "full", "switch_source", False, 4 * 3600, "accept_partial"),
    # at most one conservative retry, then human review with the raw detail
    "unclassified": (2, 5.0, 5.0, 1.0, "none", "escalate", False, 24 * 3600, "accept_partial"),
}

# Provider-specific status codes (498 token expired, 420 enhance your calm, 529 overloaded),
# mapped by overrides rather than core rules.
DEFAULT_OVERRIDES = [
    (
        "",
        "status_code",
        "498",
        "auth_failure",
        False,
        "498 token expired/invalid (e.g. Esri, NGINX)",
    ),
    ("", "status_code", "420", "rate_limited", True, "420 Enhance Your Calm (legacy Twitter)"),
    ("", "status_code", "529", "server_fault", True, "529 overloaded (Anthropic)"),
]


def seed(apps, schema_editor):
    RoutingPolicy = apps.get_model("orchestrator", "RoutingPolicy")
    ProviderOverride = apps.get_model("orchestrator", "ProviderOverride")
    PolicyState = apps.get_model("orchestrator", "PolicyState")
    for ftype, row in DEFAULT_POLICIES.items():
        attempts, base, cap, mult, jitter, exhausted, hard, deadline, fallback = row
        RoutingPolicy.objects.update_or_create(
            failure_type=ftype,
            defaults=dict(
                max_attempts=attempts,
                base_delay=base,
                max_delay=cap,
                multiplier=mult,
                jitter=jitter,
                action_when_exhausted=exhausted,
                hard_fail=hard,
                review_deadline=deadline,
                review_fallback=fallback,
            ),
        )
    for provider, match_on, value, ftype, retryable, note in DEFAULT_OVERRIDES:
        ProviderOverride.objects.get_or_create(
            provider=provider,
            match_on=match_on,
            match_value=value,
            defaults=dict(failure_type=ftype, retryable=retryable, note=note),
        )
    PolicyState.objects.get_or_create(pk=1, defaults={"version": 1})


class Migration(migrations.Migration):
    dependencies = [("orchestrator", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
