from orchestrator.models import ApiToken, PolicyState, RoutingPolicy


def test_it_seeds_one_policy_per_failure_type(db):
    assert RoutingPolicy.objects.count() == 8
    assert PolicyState.current_version() >= 1


def test_a_token_authenticates_by_secret_and_stops_when_revoked(db):
    token, secret = ApiToken.issue("agent")
    assert ApiToken.objects.authenticate(secret) == token
    assert ApiToken.objects.authenticate(secret + "x") is None
    assert token.revoke() is True
    assert token.revoke() is False
    assert ApiToken.objects.authenticate(secret) is None


def test_touching_a_token_writes_at_most_once_a_minute(db, django_assert_num_queries):
    from datetime import timedelta

    from django.utils import timezone

    token, _ = ApiToken.issue("agent")
    now = timezone.now()
    token.touch(now)
    token.refresh_from_db()
    assert token.last_used_at == now
    with django_assert_num_queries(0):  # fresh: no query on the request path
        token.touch(now + timedelta(seconds=30))
    later = now + timedelta(seconds=90)
    token.touch(later)
    token.refresh_from_db()
    assert token.last_used_at == later
