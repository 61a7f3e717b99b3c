"""API tokens: one named credential per agent or coordinator, with the callback URL and signing
secret its review resolutions are delivered with."""

from __future__ import annotations

import base64
import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from orchestrator.memo import LocalMemo
from orchestrator.models.audit import AuditEntry


class ApiTokenQuerySet(models.QuerySet):
    def active(self) -> ApiTokenQuerySet:
        return self.filter(revoked_at__isnull=True)

    def authenticate(self, secret: str) -> ApiToken | None:
        return self.active().filter(hashed=ApiToken.hash_secret(secret)).first()


class ApiTokenManager(models.Manager.from_queryset(ApiTokenQuerySet)):  # type: ignore[misc]
    def authenticate_cached(self, secret: str) -> ApiToken | None:
        """`authenticate`, remembered per process for API_TOKEN_CACHE_SECONDS (unknown secrets
        too: a client hammering with a bad token costs no query); `revoke` forgets them all."""
        hashed = ApiToken.hash_secret(secret)
        return _TOKENS.get(hashed, lambda: self.active().filter(hashed=hashed).first())


class ApiToken(models.Model):
    """A named credential for one agent or coordinator. Only a hash of the secret is stored."""

    PREFIX = "fs_"
    LAST_USED_RESOLUTION = timedelta(seconds=60)

    name = models.CharField(max_length=100)
    hashed = models.CharField(max_length=64, unique=True, editable=False)
    hint = models.CharField(
        max_length=16, editable=False, help_text="First characters, to recognise it"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The signing key is encrypted with a key derived from SECRET_KEY and shown only once.
    callback_url = models.URLField(
        max_length=500, blank=True, help_text="Resolutions of this token's review items go here"
    )
    sealed_signing_secret = models.TextField(blank=True, editable=False)

    objects = ApiTokenManager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    @staticmethod
    def hash_secret(secret: str) -> str:
        # The secret has 256 bits of entropy, so a fast hash is safe and keeps auth O(1).
        return hashlib.sha256(secret.encode()).hexdigest()

    @classmethod
    def issue(cls, name: str, created_by: Any = None) -> tuple[ApiToken, str]:
        """Create a token; return it with its secret, which is never stored and shown only once."""
        secret = cls.PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            name=name, hashed=cls.hash_secret(secret), hint=secret[:10], created_by=created_by
        )
        return token, secret

    @classmethod
    def issue_audited(cls, name: str, actor: Any = None, note: str = "") -> tuple[ApiToken, str]:
        user = actor if getattr(actor, "is_authenticated", False) else None
        with transaction.atomic():
            token, secret = cls.issue(name, created_by=user)
            AuditEntry.record(
                actor=actor,
                action="apitoken.create",
                obj=token,
                before=None,
                after={"name": token.name, "hint": token.hint},
                note=note,
            )
        return token, secret

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def set_callback(self, url: str, actor: Any = None) -> str:
        """Point this token's resolutions at `url` with a new signing secret, returned once."""
        secret, self.sealed_signing_secret = new_signing_secret()
        before = {"callback_url": self.callback_url}
        self.callback_url = url
        self.full_clean(exclude=["hashed", "hint"])
        with transaction.atomic():
            self.save(update_fields=["callback_url", "sealed_signing_secret"])
            AuditEntry.record(
                actor=actor,
                action="apitoken.callback",
                obj=self,
                before=before,
                after={"callback_url": url},
                note="a new signing secret was issued",
            )
        return secret

    def signing_secret(self) -> str:
        """The secret webhooks are signed with ("" if none was issued)."""
        return open_sealed(self.sealed_signing_secret)

    def revoke(self) -> bool:
        """Revoke the token; False if it was already revoked."""
        _TOKENS.forget()
        changed = ApiToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        self.refresh_from_db(fields=["revoked_at"])
        transaction.on_commit(_TOKENS.forget)  # a lookup in between may have remembered it
        return bool(changed)

    def revoke_audited(self, actor: Any = None, note: str = "") -> bool:
        with transaction.atomic():
            if not self.revoke():
                return False
            AuditEntry.record(
                actor=actor,
                action="apitoken.revoke",
                obj=self,
                before={"revoked_at": None},
                after={"revoked_at": self.revoked_at.isoformat()},
                note=note,
            )
        return True

    def touch(self, now: datetime | None = None) -> None:
        """Record use, at most once per LAST_USED_RESOLUTION."""
        now = now or timezone.now()
        stale = now - self.LAST_USED_RESOLUTION
        if self.last_used_at is not None and self.last_used_at >= stale:
            return
        ApiToken.objects.filter(pk=self.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=stale)
        ).update(last_used_at=now)
        self.last_used_at = now


_TOKENS: LocalMemo[ApiToken | None] = LocalMemo(lambda: settings.API_TOKEN_CACHE_SECONDS)


def new_signing_secret() -> tuple[str, str]:
    """A new webhook signing secret, and its sealed form: the only one kept, to sign with."""
    secret = "whsec_" + secrets.token_urlsafe(32)
    return secret, _fernet().encrypt(secret.encode()).decode()


def open_sealed(sealed: str) -> str:
    """The secret a sealed one holds ("" for none)."""
    return _fernet().decrypt(sealed.encode()).decode() if sealed else ""


def _fernet() -> Any:
    """The cipher of stored signing secrets (a new SECRET_KEY means new signing secrets)."""
    from cryptography.fernet import Fernet

    digest = hashlib.sha256(b"failsight webhook secrets\n" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))
