"""API tokens: one named credential per agent or coordinator, with the scopes it was granted and the
callback URL and signing secret its review resolutions are delivered with."""

from __future__ import annotations

import base64
import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from orchestrator.memo import LocalMemo
from orchestrator.models.audit import AuditEntry
from orchestrator.models.projects import DEFAULT_PROJECT_ID

# What a token may do beyond its own work (the runs, workflows and review items it reported):
# granted explicitly, never by default (orchestrator.scopes applies them).
READ_ALL = "read:all"
ACT_ALL = "act:all"
SCOPES = {
    READ_ALL: "read every token's runs, workflows and review items",
    ACT_ALL: "act on every token's runs, workflows and review items (decide, escalate, retry, "
    "finish, acknowledge)",
}


def validate_scopes(value: Any) -> None:
    """A list of known scope names, each once."""
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise ValidationError("Scopes are a list of names.")
    unknown = sorted(set(value) - set(SCOPES))
    if unknown:
        known = ", ".join(SCOPES)
        raise ValidationError(f"Unknown scope(s): {', '.join(unknown)} (known: {known}).")
    if len(set(value)) != len(value):
        raise ValidationError("A scope is named twice.")


def normal_scopes(scopes: Any) -> list[str]:
    """`scopes` validated, in the order SCOPES lists them, each once."""
    given = list(dict.fromkeys(scopes or ()))
    validate_scopes(given)
    return [name for name in SCOPES if name in given]


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
    running_timeout = models.DurationField(
        null=True,
        blank=True,
        validators=[MinValueValidator(timedelta(seconds=1))],
        help_text="How long a run this token reports as running may stay unfinished before the "
        "sweeper finishes it as a timeout (seconds, or HH:MM:SS); blank: RUN_RUNNING_TIMEOUT",
    )
    # A list of SCOPES' names; empty (the default): the token reads and acts on its own work only.
    scopes = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_scopes],
        help_text="Beyond its own runs, workflows and review items: read:all, act:all",
    )

    # The project whose runs, workflows and review items this token reports and sees.
    project = models.ForeignKey(
        "Project", default=DEFAULT_PROJECT_ID, on_delete=models.PROTECT, related_name="tokens"
    )

    objects = ApiTokenManager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    def save(self, *args: Any, **kwargs: Any) -> None:
        super().save(*args, **kwargs)
        _PROJECTS.forget()  # a token moved to another project reports into it at once here

    @staticmethod
    def hash_secret(secret: str) -> str:
        # The secret has 256 bits of entropy, so a fast hash is safe and keeps auth O(1).
        return hashlib.sha256(secret.encode()).hexdigest()

    @classmethod
    def issue(
        cls,
        name: str,
        created_by: Any = None,
        running_timeout: timedelta | None = None,
        scopes: Any = (),
        project_id: int = DEFAULT_PROJECT_ID,
    ) -> tuple[ApiToken, str]:
        """Create a token; return it with its secret, which is never stored and shown only once.
        `scopes`: what it may do beyond its own work (SCOPES), none unless granted here; never
        beyond `project_id`'s."""
        secret = cls.PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            name=name,
            hashed=cls.hash_secret(secret),
            hint=secret[:10],
            created_by=created_by,
            running_timeout=running_timeout,
            scopes=normal_scopes(scopes),
            project_id=project_id,
        )
        return token, secret

    @classmethod
    def issue_audited(
        cls,
        name: str,
        actor: Any = None,
        note: str = "",
        running_timeout: timedelta | None = None,
        scopes: Any = (),
        project_id: int = DEFAULT_PROJECT_ID,
    ) -> tuple[ApiToken, str]:
        user = actor if getattr(actor, "is_authenticated", False) else None
        with transaction.atomic():
            token, secret = cls.issue(
                name,
                created_by=user,
                running_timeout=running_timeout,
                scopes=scopes,
                project_id=project_id,
            )
            after: dict[str, Any] = {"name": token.name, "hint": token.hint}
            if project_id != DEFAULT_PROJECT_ID:
                after["project"] = token.project.slug
            if running_timeout is not None:
                after["running_timeout"] = _seconds(running_timeout)
            if token.scopes:
                after["scopes"] = token.scopes
            AuditEntry.record(
                actor=actor,
                action="apitoken.create",
                obj=token,
                before=None,
                after=after,
                note=note,
            )
        return token, secret

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def has_scope(self, scope: str) -> bool:
        return scope in (self.scopes or ())

    def set_scopes(self, scopes: Any, actor: Any = None, note: str = "") -> bool:
        """Grant exactly `scopes` (SCOPES' names), audited; False if they were granted already."""
        wanted = normal_scopes(scopes)
        stored = ApiToken.objects.filter(pk=self.pk).values_list("scopes", flat=True).first()
        before = normal_scopes(stored) if stored is not None else []
        self.scopes = wanted
        if wanted == before:
            return False
        with transaction.atomic():
            ApiToken.objects.filter(pk=self.pk).update(scopes=wanted)
            AuditEntry.record(
                actor=actor,
                action="apitoken.scopes",
                obj=self,
                before={"scopes": before},
                after={"scopes": wanted},
                note=note,
            )
        _TOKENS.forget()  # authenticated tokens are remembered with their scopes
        transaction.on_commit(_TOKENS.forget)
        return True

    @property
    def effective_running_timeout(self) -> timedelta:
        """How long a run this token reports as running may stay so: its own, or the default."""
        return self.running_timeout or default_running_timeout()

    def set_running_timeout(self, value: timedelta | None, actor: Any = None) -> None:
        """Change this token's running timeout (None: RUN_RUNNING_TIMEOUT), audited."""
        before = {"running_timeout": _seconds(self.running_timeout)}
        self.running_timeout = value
        self.full_clean(exclude=["hashed", "hint"])
        with transaction.atomic():
            self.save(update_fields=["running_timeout"])
            AuditEntry.record(
                actor=actor,
                action="apitoken.running_timeout",
                obj=self,
                before=before,
                after={"running_timeout": _seconds(value)},
            )

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


def default_running_timeout() -> timedelta:
    return timedelta(seconds=settings.RUN_RUNNING_TIMEOUT)


def _seconds(value: timedelta | None) -> float | None:
    return value.total_seconds() if value is not None else None


_TOKENS: LocalMemo[ApiToken | None] = LocalMemo(lambda: settings.API_TOKEN_CACHE_SECONDS)
_PROJECTS: LocalMemo[int] = LocalMemo(lambda: settings.API_TOKEN_CACHE_SECONDS)


def project_of(token_id: int | None) -> int:
    """The project of the token `token_id` (the default one for none), remembered per process as
    long as the token itself: the project each run it reports is stored under."""
    if token_id is None:
        return DEFAULT_PROJECT_ID

    def load() -> int:
        found = ApiToken.objects.filter(pk=token_id).values_list("project_id", flat=True).first()
        return found or DEFAULT_PROJECT_ID

    return _PROJECTS.get(token_id, load)


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
