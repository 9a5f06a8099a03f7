"""API keys: bearer secrets bound to a tenant, a scope prefix and a role.

>>> import cenotaph, tempfile
>>> store = cenotaph.open(tempfile.mkdtemp())
>>> ring = ApiKeyRing(store)  # or ApiKeyRing(data_dir): the provider cenotaph.open would use
>>> key, secret = ring.create(tenant="acme", prefix="tenant:acme/user:alice", role="agent")
>>> ring.authenticate(secret) == key
True
>>> ring.revoke(key.id)
>>> ring.authenticate(secret) is None
True
>>> store.close()

Storage: ``<data dir>/api-keys/`` (0700) holds ``pepper`` (32 random bytes, 0600: the key of the
secrets' hashes) and ``keys.json`` (0600, replaced atomically). Each entry keeps in clear only what
names nobody: the key's id, its creation, revocation and erasure times, and ``hash`` =
HMAC-SHA256(pepper, secret) -- never the secret. Its binding (tenant, prefix, role) is
``binding``: sealed with AES-256-GCM under a key derived from the store's key provider
(:meth:`cenotaph.Store.service_key`), with every clear field as associated data. So the file
holds no scope id in clear, and an entry edited outside this module (a role raised, a prefix
widened, a revocation removed, a hash swapped, a binding moved to another entry) no longer
opens and authenticates nobody; minting a key needs the keyring, which production keeps apart
from the data directory. The pepper keys the secrets' hashes and nothing else: what the server
keeps beside the keys (``owners.jsonl``, its cursors) is MAC'd or sealed under keys derived
from the key provider too, one per purpose (:meth:`ApiKeyRing.service_key`), so writing this
directory forges none of it.

A secret reads ``cnk_<16 hex: the key id>_<43 base64url characters: 256 random bits>``: the id
finds the one entry to compare against (in constant time), so a guess costs the same whatever it
names. ``authenticate`` re-reads the file whenever it changed, so a revocation made by another
process (``cenotaph api-keys revoke``) takes effect at the next request.

Subject erasure: :meth:`ApiKeyRing.erase_subject` revokes every key whose prefix lies inside the
erased subject's scope and re-seals its binding without that scope (the prefix becomes the scope
just above the subject, or nothing when the subject is the tenant itself), so ``keys.json`` names
nothing of an erased subject, even sealed. The server calls it for each subject erasure it runs.

Only this sealed format is read. A file in any other (such as the unsealed one older versions
wrote, bindings in clear under an HMAC keyed by the pepper) is refused whole, as a corrupt one
is: MAC'd under what sits beside it, it could be written by anyone who can write the directory.

Not covered: someone who can write the file can put back an older copy (undoing a later
revocation). Keep the data directory private, as its keyring already requires.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import contextlib
import fcntl
import functools
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from cenotaph import KeyProvider, Scope, Store
from cenotaph.operations import Sealer, keyring_from_env, service_key, write_atomically

from ..errors import InvalidScopeError, InvalidValueError, NotFoundError, StorageError

__all__ = ["ApiKey", "ApiKeyRing", "Role", "KEYS_DIR"]

KEYS_DIR = "api-keys"
_FORMAT = "cenotaph-api-keys/2"
_PEPPER_BYTES = 32
_SECRET = re.compile(r"cnk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
_MAX_SECRET_CHARS = 256  # longer is not ours; refuse before any regex or HMAC work
_PURPOSE = "api-keys"  # what the store's service key seals here
_CLEAR_FIELDS = ("id", "created_at", "revoked_at", "erased_at", "hash")


class Role(StrEnum):
    """What a key may do: ``agent`` (read/write/search/forget inside its prefix), ``operator``
    (also subject erasure, certificates, exports, backups, key rotation and consumers) or
    ``consumer`` (a downstream consumer's key: read and export inside its prefix, recorded as
    what that consumer took, and fetch and acknowledge its own erasure events; nothing else)."""

    AGENT = "agent"
    OPERATOR = "operator"
    CONSUMER = "consumer"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One API key's binding (never its secret).

    A key erased with a subject (``erased_at`` set, always revoked) keeps as ``prefix`` only the
    scope just above that subject, and as ``tenant`` an empty string if the subject was the tenant."""

    id: str
    tenant: str
    prefix: str  # canonical scope string, always inside tenant:<tenant>
    role: Role
    created_at: datetime
    revoked_at: datetime | None = None
    erased_at: datetime | None = None
    consumer: str | None = None  # a consumer key's consumer id (store.register_consumer)

    @property
    def scope(self) -> Scope:
        return Scope.parse(self.prefix)

    def covers(self, scope: Scope) -> bool:
        """True if ``scope`` is the key's prefix or one of its descendants."""
        return bool(self.prefix) and scope.is_within(self.scope)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant or None,
            "prefix": self.prefix or None,
            "role": str(self.role),
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "erased_at": self.erased_at.isoformat() if self.erased_at else None,
            "consumer": self.consumer,
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
        raise InvalidValueError("role must be 'agent', 'operator' or 'consumer'")
    return tenant, scope, Role(str(role))


class ApiKeyRing:
    """The API keys of one store's data directory (see the module docstring for the storage)."""

    def __init__(
        self, store: Store | str | os.PathLike[str], *, key_provider: KeyProvider | None = None
    ) -> None:
        """The keys of ``store`` (an open store), or of the store in a data directory: then its
        key provider is the one ``cenotaph.open`` would use (``$CENOTAPH_KEYRING``, else the
        directory's ``keyring``) unless ``key_provider`` is given."""
        derive: Callable[[str], bytes]
        if isinstance(store, Store):
            if store.path is None:
                raise InvalidValueError(
                    "API keys need a store with a data directory, such as cenotaph.open(...) opens"
                )
            location, derive = store.path, store.service_key
        elif isinstance(store, str | os.PathLike):
            location = Path(store)
            provider = key_provider if key_provider is not None else keyring_from_env(location)
            derive = functools.partial(service_key, provider)
        else:
            raise InvalidValueError("ApiKeyRing takes an open store or its data directory")
        self._derive = derive
        seal_key = derive(_PURPOSE)
        self.path = location / KEYS_DIR
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.path, 0o700)
        except OSError as exc:
            raise StorageError(
                f"cannot create the API key directory ({exc.strerror}); check the data directory's permissions"
            ) from exc
        self._pepper = self._load_pepper()
        self._sealer = Sealer(seal_key)
        self._entries: dict[str, dict[str, Any]] = {}
        self._keys: dict[str, ApiKey | None] = {}  # id -> the opened binding, None if it does not open
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

    def _read(self) -> tuple[bytes, tuple[int, int, int]] | None:
        try:
            with open(self._file, "rb") as handle:
                stat = os.fstat(handle.fileno())
                return handle.read(), (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read the API key file ({exc.strerror}); check permissions") from exc

    def _refresh(self) -> None:
        """Reload ``keys.json`` if another process (or this one) replaced it since we read it."""
        with self._reload_lock:
            try:
                stat = os.stat(self._file)
            except FileNotFoundError:
                self._entries, self._keys, self._stamp = {}, {}, None
                return
            except OSError as exc:
                raise StorageError(
                    f"cannot read the API key file ({exc.strerror}); check permissions"
                ) from exc
            if (stat.st_ino, stat.st_size, stat.st_mtime_ns) == self._stamp:
                return
            read = self._read()
            if read is None:
                self._entries, self._keys, self._stamp = {}, {}, None
                return
            raw, stamp = read
            entries = _parse(raw)
            self._entries, self._stamp = entries, stamp
            self._keys = {key_id: self._open(entry) for key_id, entry in entries.items()}

    def _save(self) -> None:
        body = json.dumps({"format": _FORMAT, "keys": list(self._entries.values())}, sort_keys=True)
        write_atomically(self._file, body.encode())
        self._stamp = None  # the next read stamps the file it reads

    # -- hashes and seals ----------------------------------------------------------------
    def _hash(self, secret: str) -> str:
        return hmac.new(self._pepper, b"cenotaph-api-key\0" + secret.encode(), hashlib.sha256).hexdigest()

    @staticmethod
    def _aad(entry: dict[str, Any]) -> bytes:
        clear = {name: entry.get(name) for name in _CLEAR_FIELDS}
        return b"cenotaph-api-key/2\0" + json.dumps(clear, sort_keys=True, separators=(",", ":")).encode()

    def _seal(self, entry: dict[str, Any], binding: dict[str, Any]) -> str:
        plain = json.dumps(binding, sort_keys=True, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(self._sealer.seal(plain, self._aad(entry))).decode()

    def _open(self, entry: dict[str, Any]) -> ApiKey | None:
        """The entry's key if its binding opens under this store's key with its clear fields."""
        sealed = entry.get("binding")
        if not isinstance(sealed, str) or not sealed:
            return None
        try:
            plain = self._sealer.open(base64.urlsafe_b64decode(sealed), self._aad(entry))
            if plain is None:
                return None
            return _to_key(entry, json.loads(plain))
        except (binascii.Error, ValueError, KeyError, TypeError):
            return None

    def service_key(self, purpose: str) -> bytes:
        """A 32-byte key for ``purpose`` derived from the store's key provider
        (:meth:`cenotaph.Store.service_key`), one per purpose: what the server keeps beside the
        keys is MAC'd or sealed under one. Never the pepper: it sits in this same directory, so
        whoever can write the files could forge with it."""
        if purpose == _PURPOSE:
            raise InvalidValueError(f"the purpose {_PURPOSE!r} is the bindings' own; name another")
        return self._derive(purpose)

    # -- API -----------------------------------------------------------------------------
    def create(
        self, *, tenant: str, prefix: str | None = None, role: str | Role, consumer: str | None = None
    ) -> tuple[ApiKey, str]:
        """A new key and its secret. The secret is returned once and stored only as a keyed hash.
        A ``consumer`` key names the consumer it acts for (its id); no other role names one."""
        tenant, scope, checked_role = check_binding(tenant, prefix, role)
        if (checked_role == Role.CONSUMER) != (consumer is not None):
            raise InvalidValueError(
                "a consumer key needs the id of a registered consumer (store.register_consumer), "
                "and only a consumer key takes one"
            )
        key_id = secrets.token_hex(8)
        secret = f"cnk_{key_id}_{secrets.token_urlsafe(32)}"
        entry: dict[str, Any] = {
            "id": "ak_" + key_id,
            "created_at": datetime.now(UTC).isoformat(),
            "revoked_at": None,
            "erased_at": None,
            "hash": self._hash(secret),
        }
        binding: dict[str, Any] = {"tenant": tenant, "prefix": scope.path, "role": str(checked_role)}
        if consumer is not None:
            binding["consumer"] = consumer
        entry["binding"] = self._seal(entry, binding)
        with self._locked():
            self._refresh()
            self._entries[entry["id"]] = entry
            self._save()
        return _to_key(entry, binding), secret

    def list(self) -> list[ApiKey]:
        """Every key, revoked and erased ones included, oldest first. Raises StorageError if an
        entry was edited outside cenotaph (naming the key ids, which are not secret)."""
        with self._locked():
            self._refresh()
            keys = dict(self._keys)
        altered = [key_id for key_id, key in keys.items() if key is None]
        if altered:
            raise StorageError(
                f"the API key file was edited outside cenotaph (keys {', '.join(sorted(altered))}); "
                "those keys authenticate nobody: revoke them and create new ones"
            )
        return sorted((k for k in keys.values() if k is not None), key=lambda k: (k.created_at, k.id))

    def get(self, key_id: str) -> ApiKey | None:
        """The key with this id (revoked or not), unless its entry was edited outside cenotaph."""
        self._refresh()
        return self._keys.get(key_id)

    def revoke(self, key_id: str) -> None:
        """Revoke a key: every request from the next one on is refused. Revoking twice is a no-op."""
        if not isinstance(key_id, str):
            raise InvalidValueError("key_id must be an id returned by ApiKeyRing.create()")
        with self._locked():
            self._refresh()
            entry = self._entries.get(key_id)
            if entry is None:
                raise NotFoundError("no API key has this id; ApiKeyRing.list() shows them")
            key = self._keys.get(key_id)
            if key is not None and key.revoked_at is not None:
                return
            revoked = {**entry, "revoked_at": datetime.now(UTC).isoformat()}
            # an entry that no longer opens stays unopenable (and revoked, for whoever reads it)
            revoked["binding"] = "" if key is None else self._seal(revoked, _binding_of(key))
            self._entries[key_id] = revoked
            self._save()

    def erase_subject(self, subject: str) -> builtins.list[str]:
        """After a subject erasure: revoke every key whose prefix lies inside ``subject`` (a scope
        path) and keep no trace of that scope in its binding; return their ids."""
        try:
            erased = Scope.parse(subject)
        except InvalidScopeError:
            return []  # an opaque subject names no scope, so no key's prefix
        above = erased.parent()
        now = datetime.now(UTC).isoformat()
        changed = []
        with self._locked():
            self._refresh()
            for key_id, key in sorted(self._keys.items(), key=lambda item: item[0]):
                if key is None or not key.prefix or not key.scope.is_within(erased):
                    continue
                entry = dict(self._entries[key_id])
                entry["revoked_at"] = entry.get("revoked_at") or now
                entry["erased_at"] = now
                kept = {
                    "tenant": key.tenant if above is not None else "",
                    "prefix": above.path if above is not None else "",
                    "role": str(key.role),
                    **({"consumer": key.consumer} if key.consumer else {}),
                }
                entry["binding"] = self._seal(entry, kept)
                self._entries[key_id] = entry
                changed.append(key_id)
            if changed:
                self._save()
        return changed

    def authenticate(self, secret: object) -> ApiKey | None:
        """The live key this secret belongs to, else None (missing, malformed, unknown, revoked,
        erased or edited). The secret is compared in constant time against the one entry its id
        names."""
        match = (
            _SECRET.fullmatch(secret) if isinstance(secret, str) and len(secret) < _MAX_SECRET_CHARS else None
        )
        candidate = self._hash(secret if match and isinstance(secret, str) else "")
        self._refresh()
        key_id = "ak_" + match.group(1) if match else ""
        entry = self._entries.get(key_id)
        stored = entry.get("hash") if entry is not None else None
        if not isinstance(stored, str):
            hmac.compare_digest(candidate, self._decoy)
            return None
        if not hmac.compare_digest(candidate, stored):
            return None
        key = self._keys.get(key_id)
        return key if key is not None and key.revoked_at is None else None


def _parse(raw: bytes) -> dict[str, dict[str, Any]]:
    try:
        doc = json.loads(raw)
        if doc.get("format") != _FORMAT or not isinstance(doc.get("keys"), list):
            raise ValueError("not an API key file")
        return {str(e["id"]): e for e in doc["keys"] if isinstance(e, dict)}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StorageError(
            "the API key file is corrupt or not in the sealed format this cenotaph writes; restore "
            "it from a trusted copy, or remove it and create the keys again"
        ) from exc


def _binding_of(key: ApiKey) -> dict[str, Any]:
    binding: dict[str, Any] = {"tenant": key.tenant, "prefix": key.prefix, "role": str(key.role)}
    if key.consumer:
        binding["consumer"] = key.consumer
    return binding


def _to_key(entry: dict[str, Any], binding: dict[str, Any]) -> ApiKey:
    revoked, erased = entry.get("revoked_at"), entry.get("erased_at")
    return ApiKey(
        id=str(entry["id"]),
        tenant=str(binding["tenant"]),
        prefix=str(binding["prefix"]),
        role=Role(binding["role"]),
        created_at=datetime.fromisoformat(entry["created_at"]),
        revoked_at=datetime.fromisoformat(revoked) if revoked else None,
        erased_at=datetime.fromisoformat(erased) if erased else None,
        consumer=str(binding["consumer"]) if binding.get("consumer") else None,
    )
