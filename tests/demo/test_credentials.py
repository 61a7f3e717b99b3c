"""`make run`'s local credentials: the same token at every launch, kept in a file only its owner
reads; a token replaced is revoked (audited), and the launch can say which."""

from __future__ import annotations

import stat

import pytest

from demo.credentials import FILE_NAME, LocalCredentials
from orchestrator.models import ApiToken, AuditEntry

pytestmark = pytest.mark.django_db

NAME = "local-agent (make run)"


def test_a_token_is_kept_from_one_launch_to_the_next(tmp_path):
    first = LocalCredentials(tmp_path).api_token("api", NAME, note="launch")
    again = LocalCredentials(tmp_path).api_token("api", NAME, note="launch")
    assert not first.kept and again.kept and again.secret == first.secret
    assert ApiToken.objects.authenticate(again.secret) is not None
    assert ApiToken.objects.filter(name=NAME).count() == 1
    assert stat.S_IMODE((tmp_path / FILE_NAME).stat().st_mode) == 0o600


def test_a_token_revoked_in_the_admin_is_replaced_and_the_launch_says_so(tmp_path):
    first = LocalCredentials(tmp_path).api_token("api", NAME, note="launch")
    ApiToken.objects.authenticate(first.secret).revoke()
    second = LocalCredentials(tmp_path).api_token("api", NAME, note="launch")
    assert not second.kept and second.lost and second.secret != first.secret
    assert ApiToken.objects.authenticate(second.secret) is not None


def test_an_earlier_launchs_token_that_was_not_kept_is_revoked_by_name(tmp_path):
    old, _ = ApiToken.issue(NAME)  # what a launch before kept tokens left
    other, _ = ApiToken.issue("someone else's agent")
    issued = LocalCredentials(tmp_path).api_token("api", NAME, note="launch")
    assert issued.revoked == [old.hint] and not issued.lost
    old.refresh_from_db()
    other.refresh_from_db()
    assert old.revoked_at is not None and other.revoked_at is None
    assert AuditEntry.objects.filter(action="apitoken.revoke").count() == 1


def test_an_unreadable_file_is_started_again_and_a_secret_is_made_once(tmp_path):
    (tmp_path / FILE_NAME).write_text("not json")
    kept = LocalCredentials(tmp_path)
    assert kept.data == {}
    secret = kept.secret("metrics")
    assert len(secret) >= 32 and LocalCredentials(tmp_path).secret("metrics") == secret
