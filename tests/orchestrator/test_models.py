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
