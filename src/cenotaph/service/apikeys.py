"""API keys: bearer secrets bound to a tenant, a scope prefix and a role.

>>> import tempfile
>>> ring = ApiKeyRing(tempfile.mkdtemp())
>>> key, secret = ring.create(tenant="acme", prefix="tenant:acme/user:alice", role="agent")
>>> ring.authenticate(secret) == key
True
>>> ring.revoke(key.id)
>>> ring.authenticate(secret) is None
True

Storage: ``<data dir>/api-keys/`` (0700) holds ``pepper`` (32 random bytes, 0600: the HMAC key)
and ``keys.json`` (0600, replaced atomically). Each entry keeps the key's id, tenant, prefix,
role, creation and revocation times, ``hash`` = HMAC-SHA256(pepper, secret) -- never the secret
-- and ``mac``, an HMAC over every other field, so an entry edited outside this module (a role
raised, a prefix widened, a revocation removed, a hash swapped) no longer authenticates anyone.

A secret reads ``cnk_<16 hex: the key id>_<43 base64url characters: 256 random bits>``: the id
finds the one entry to compare against (in constant time), so a guess costs the same whatever it
names. ``authenticate`` re-reads the file whenever it changed, so a revocation made by another
process (``cenotaph api-keys revoke``) takes effect at the next request.

Not covered: someone who can read ``pepper`` and write ``keys.json`` can mint keys, and someone who
can write the file can put back an older copy (undoing a later revocation). Keep the data directory
private, as its keyring already requires.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..durable import write_atomically
from ..errors import InvalidScopeError, InvalidValueError, NotFoundError, StorageError
from ..scope import Scope

__all__ = ["ApiKey", "ApiKeyRing", "Role", "KEYS_DIR"]

KEYS_DIR = "api-keys"
_FORMAT = "cenotaph-api-keys/1"
_PEPPER_BYTES = 32
_SECRET = re.compile(r"cnk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
_MAX_SECRET_CHARS = 256  # longer is not ours; refuse before any regex or HMAC work


class Role(StrEnum):
    """What a key may do: ``agent`` (read/write/search/forget inside its prefix) or ``operator``
    (also subject erasure, certificates, exports, backups and key rotation)."""

    AGENT = "agent"
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One API key's binding (never its secret)."""

    id: str
    tenant: str
    prefix: str  # canonical scope string, always inside tenant:<tenant>
    role: Role
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def scope(self) -> Scope:
        return Scope.parse(self.prefix)

    def covers(self, scope: Scope) -> bool:
        """True if ``scope`` is the key's prefix or one of its descendants."""
        return scope.is_within(self.scope)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "prefix": self.prefix,
            "role": str(self.role),
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }


def check_binding(tenant: object, prefix: object, role: object) -> tuple[str, Scope, Role]:
    """The canonical (tenant id, prefix, role); raise InvalidValueError saying what is wrong."""
    if not isinstance(tenant, str):
        raise InvalidValueError("tenant must be a tenant id such as 'acme'")
    tenant = tenant.removeprefix("tenant:")
    try:
        root = Scope.parse(f"tenant:{tenant}")
    except InvalidScopeError:
        raise InvalidValueError(
            "tenant must be a tenant id: 1..200 printable characters without '/'"
        ) from None
    if len(root.segments) != 1:
        raise InvalidValueError("tenant must be a tenant id without '/', such as 'acme'")
    scope = root if prefix is None else Scope.parse(prefix)
    if not scope.is_within(root):
        raise InvalidValueError(f"the prefix must be a scope inside {root.path}, e.g. {root.path}/user:alice")
    if role not in tuple(Role):
        raise InvalidValueError("role must be 'agent' or 'operator'")
    return tenant, scope, Role(str(role))


class ApiKeyRing:
    """The API keys of one data directory (see the module docstring for the storage)."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = Path(data_dir) / KEYS_DIR
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.path, 0o700)
        except OSError as exc:
            raise StorageError(
                f"cannot create the API key directory ({exc.strerror}); check the data directory's permissions"
            ) from exc
        self._pepper = self._load_pepper()
        self._entries: dict[str, dict[str, Any]] = {}
        self._stamp: tuple[int, int, int] | None = None
        self._reload_lock = threading.Lock()
        # a guess naming no key still costs one HMAC and one comparison, like a guess naming one
        self._decoy = self._hash("cnk_" + "0" * 16 + "_" + "A" * 43)

    # -- files ---------------------------------------------------------------------------
    @property
    def _file(self) -> Path:
        return self.path / "keys.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        with os.fdopen(fd, "r+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _load_pepper(self) -> bytes:
        pepper_file = self.path / "pepper"
        with self._locked():
            try:
                if not pepper_file.exists():
                    write_atomically(pepper_file, secrets.token_bytes(_PEPPER_BYTES))
                pepper = pepper_file.read_bytes()
            except OSError as exc:
                raise StorageError(
                    f"cannot read the API key pepper ({exc.strerror}); check permissions"
                ) from exc
        if len(pepper) != _PEPPER_BYTES:
            raise StorageError(
                "the API key pepper file is damaged; every key must be created again "
                "(remove the api-keys directory, then ApiKeyRing.create())"
            )
        return pepper

    def _refresh(self) -> None:
        """Reload ``keys.json`` if another process (or this one) replaced it since we read it."""
        with self._reload_lock:
            self._refresh_locked()

    def _refresh_locked(self) -> None:
        try:
            with open(self._file, "rb") as handle:
                stat = os.fstat(handle.fileno())
                stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
                if stamp == self._stamp:
                    return
                raw = handle.read()
        except FileNotFoundError:
            self._entries, self._stamp = {}, None
            return
        except OSError as exc:
            raise StorageError(f"cannot read the API key file ({exc.strerror}); check permissions") from exc
        self._entries, self._stamp = self._parse(raw), stamp

    @staticmethod
    def _parse(raw: bytes) -> dict[str, dict[str, Any]]:
        try:
            doc = json.loads(raw)
            if doc.get("format") != _FORMAT or not isinstance(doc.get("keys"), list):
                raise ValueError("not an API key file")
            return {str(e["id"]): e for e in doc["keys"] if isinstance(e, dict)}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StorageError(
                "the API key file is corrupt; restore it from a trusted copy or create the keys again"
            ) from exc

    def _save(self) -> None:
        body = json.dumps({"format": _FORMAT, "keys": list(self._entries.values())}, sort_keys=True)
        write_atomically(self._file, body.encode())
        self._stamp = None  # the next read stamps the file it reads

    # -- MACs ----------------------------------------------------------------------------
    def _hash(self, secret: str) -> str:
        return hmac.new(self._pepper, b"cenotaph-api-key\0" + secret.encode(), hashlib.sha256).hexdigest()

    def _mac(self, entry: dict[str, Any]) -> str:
        fields = {k: v for k, v in entry.items() if k != "mac"}
        body = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
        return hmac.new(self._pepper, b"cenotaph-api-key-entry\0" + body, hashlib.sha256).hexdigest()

    def _intact(self, entry: dict[str, Any]) -> bool:
        mac = entry.get("mac")
        return isinstance(mac, str) and hmac.compare_digest(mac, self._mac(entry))

    def mac(self, purpose: str, body: bytes) -> str:
        """An HMAC under this ring's pepper, for files the server keeps beside the keys."""
        return hmac.new(self._pepper, purpose.encode() + b"\0" + body, hashlib.sha256).hexdigest()

    # -- API -----------------------------------------------------------------------------
    def create(self, *, tenant: str, prefix: str | None = None, role: str | Role) -> tuple[ApiKey, str]:
        """A new key and its secret. The secret is returned once and stored only as a keyed hash."""
        tenant, scope, checked_role = check_binding(tenant, prefix, role)
        key_id = secrets.token_hex(8)
        secret = f"cnk_{key_id}_{secrets.token_urlsafe(32)}"
        entry: dict[str, Any] = {
            "id": "ak_" + key_id,
            "tenant": tenant,
            "prefix": scope.path,
            "role": str(checked_role),
            "created_at": datetime.now(UTC).isoformat(),
            "revoked_at": None,
            "hash": self._hash(secret),
        }
        entry["mac"] = self._mac(entry)
        with self._locked():
            self._refresh()
            self._entries[entry["id"]] = entry
            self._save()
        return _to_key(entry), secret

    def list(self) -> list[ApiKey]:
        """Every key, revoked ones included, oldest first. Raises StorageError if an entry was
        edited outside cenotaph (naming the key ids, which are not secret)."""
        with self._locked():
            self._refresh()
            entries = list(self._entries.values())
        altered = [str(e.get("id")) for e in entries if not self._intact(e)]
        if altered:
            raise StorageError(
                f"the API key file was edited outside cenotaph (keys {', '.join(sorted(altered))}); "
                "those keys authenticate nobody: revoke them and create new ones"
            )
        return sorted((_to_key(e) for e in entries), key=lambda k: (k.created_at, k.id))

    def get(self, key_id: str) -> ApiKey | None:
        """The key with this id (revoked or not), unless its entry was edited outside cenotaph."""
        self._refresh()
        entry = self._entries.get(key_id)
        return _to_key(entry) if entry is not None and self._intact(entry) else None

    def revoke(self, key_id: str) -> None:
        """Revoke a key: every request from the next one on is refused. Revoking twice is a no-op."""
        if not isinstance(key_id, str):
            raise InvalidValueError("key_id must be an id returned by ApiKeyRing.create()")
        with self._locked():
            self._refresh()
            entry = self._entries.get(key_id)
            if entry is None:
                raise NotFoundError("no API key has this id; ApiKeyRing.list() shows them")
            if entry.get("revoked_at") is not None and self._intact(entry):
                return
            entry = {**entry, "revoked_at": datetime.now(UTC).isoformat()}
            entry["mac"] = self._mac(entry)
            self._entries[key_id] = entry
            self._save()

    def authenticate(self, secret: object) -> ApiKey | None:
        """The live key this secret belongs to, else None (missing, malformed, unknown, revoked or
        edited). The secret is compared in constant time against the one entry its id names."""
        match = (
            _SECRET.fullmatch(secret) if isinstance(secret, str) and len(secret) < _MAX_SECRET_CHARS else None
        )
        candidate = self._hash(secret if match and isinstance(secret, str) else "")
        self._refresh()
        entry = self._entries.get("ak_" + match.group(1)) if match else None
        stored = entry.get("hash") if entry is not None else None
        if not isinstance(stored, str):
            hmac.compare_digest(candidate, self._decoy)
            return None
        if not hmac.compare_digest(candidate, stored) or entry is None or not self._intact(entry):
            return None
        key = _to_key(entry)
        return key if key.revoked_at is None else None


def _to_key(entry: dict[str, Any]) -> ApiKey:
    revoked = entry.get("revoked_at")
    return ApiKey(
        id=str(entry["id"]),
        tenant=str(entry["tenant"]),
        prefix=str(entry["prefix"]),
        role=Role(entry["role"]),
        created_at=datetime.fromisoformat(entry["created_at"]),
        revoked_at=datetime.fromisoformat(revoked) if revoked else None,
    )
