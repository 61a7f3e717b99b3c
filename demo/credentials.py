"""`make run`'s local credentials, the same at every launch: the API token it prints for local
agents, the external agent's token and the metrics token.

Their secrets are kept in one file of the data folder that only its owner can read. A kept token
that the database no longer accepts (revoked in the admin, or another database) is replaced, and
so is a token of the same name issued by an earlier launch that kept none: each replacement
revokes what it replaces and says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.models import ApiToken

FILE_NAME = "local-credentials.json"


@dataclass
class Issued:
    """A launch token's secret and how it came to be: kept from an earlier launch, or new."""

    secret: str
    kept: bool
    revoked: list[str] = field(default_factory=list)  # hints of the tokens it replaced
    lost: bool = False  # a kept secret was there, and the database no longer accepts it


class LocalCredentials:
    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / FILE_NAME
        self.data = self._read()

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, str)}

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(self.data, fh, indent=2)
        os.replace(tmp, self.path)

    def api_token(self, slot: str, name: str, note: str) -> Issued:
        """Return the kept token of `name` if the database still accepts it, else a new one
        (revoking, audited, every other active token of that name)."""
        secret = self.data.get(slot, "")
        token = ApiToken.objects.authenticate(secret) if secret else None
        if token is not None and token.name == name:
            return Issued(secret, kept=True)
        revoked = []
        for old in ApiToken.objects.active().filter(name=name):
            old.revoke_audited(note="replaced by a new launch: not the token it keeps")
            revoked.append(old.hint)
        _, self.data[slot] = ApiToken.issue_audited(name, note=note)
        self._write()
        return Issued(self.data[slot], kept=False, revoked=revoked, lost=bool(secret))

    def secret(self, slot: str) -> str:
        """Return the kept secret of `slot`, made (and kept) at its first use."""
        if not self.data.get(slot):
            self.data[slot] = secrets.token_urlsafe(24)
            self._write()
        return self.data[slot]
