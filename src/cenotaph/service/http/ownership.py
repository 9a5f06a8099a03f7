"""Which API key started each erasure request and made each backup through the server.

The store's requests and backups carry no scope or tenant (they are content-free by design), so
the server remembers who made them: ``api-keys/owners.jsonl``, one line per object, ``{"kind",
"id", "key", "version", "mac"}`` -- ids and the forget's version only. Each line is MAC'd
(HMAC-SHA256) under a key derived from the store's key provider for this file alone
(:meth:`ApiKeyRing.service_key`), never under anything kept in ``api-keys/``: whoever can write
that directory (and read its pepper) still cannot make a line that names their key as a forget's
owner, and a line minted by another store (another keyring) does not verify here. A line that
does not verify names nobody and is ignored. A key sees a request when the key that made it lies
inside its own prefix, and an agent key may lift (reauthorize) only the forgets its own key made:
:meth:`Ownership.forget_owner` answers which key made the forget at a version. Requests made with
the library or the CLI have no owner here: no key sees them over HTTP, and only an operator key
lifts them. Lines written before versions were recorded learn theirs from the store's request.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, Literal

from ...durable import write_all
from ...errors import StorageError
from ..apikeys import ApiKey, ApiKeyRing

__all__ = ["Ownership"]

Kind = Literal["erasure", "backup"]
PURPOSE = "http-owners"  # the provider-derived key this file's lines are MAC'd under
_MAC_CONTEXT = b"cenotaph-owner-line/2\0"


class Ownership:
    def __init__(self, ring: ApiKeyRing, version_of: Callable[[str], int | None]) -> None:
        self._mac_key = ring.service_key(PURPOSE)
        self._version_of = version_of  # an erasure request's version, for lines without one
        self._file = ring.path / "owners.jsonl"
        self._owners: dict[tuple[str, str], str] = {}
        self._by_version: dict[int, str] = {}  # forget version -> the key that made it
        self._unversioned: dict[str, str] = {}  # erasure request id -> key, version not yet known
        self._read = 0
        self._lock = threading.Lock()

    def _line_mac(self, kind: str, object_id: str, key_id: str, version: int | None = None) -> str:
        body = json.dumps([kind, object_id, key_id, version], separators=(",", ":")).encode()
        return hmac.new(self._mac_key, _MAC_CONTEXT + body, hashlib.sha256).hexdigest()

    def record(self, kind: Kind, object_id: str, key: ApiKey, version: int | None = None) -> None:
        """Durably note that ``key`` made ``object_id`` (a forget: at ``version``), appended and
        fsynced before it returns."""
        line: dict[str, Any] = {"kind": kind, "id": object_id, "key": key.id}
        if version is not None:
            line["version"] = version
        line["mac"] = self._line_mac(kind, object_id, key.id, version)
        try:
            fd = os.open(self._file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                with _locked(fd):
                    write_all(fd, (json.dumps(line, sort_keys=True) + "\n").encode())
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageError(
                f"cannot record the request's owner ({exc.strerror}); check permissions"
            ) from exc
        with self._lock:
            self._owners[(kind, object_id)] = key.id
            if version is not None:
                self._by_version[version] = key.id

    def forget_owner(self, version: int) -> str | None:
        """The id of the key that made the forget at ``version`` through this server, else None."""
        self._catch_up()
        with self._lock:
            owner = self._by_version.get(version)
            pending = dict(self._unversioned) if owner is None else {}
        for request_id, key_id in pending.items():  # lines from before versions were recorded
            found = self._version_of(request_id)
            with self._lock:
                self._unversioned.pop(request_id, None)
                if found is not None:
                    self._by_version.setdefault(found, key_id)
            if found == version:
                owner = key_id
        return owner

    def owner(self, kind: Kind, object_id: str) -> str | None:
        self._catch_up()
        return self._owners.get((kind, object_id))

    def owned(self, kind: Kind) -> dict[str, str]:
        """Every object of ``kind`` with the id of the key that made it."""
        self._catch_up()
        with self._lock:
            return {oid: key for (k, oid), key in self._owners.items() if k == kind}

    def _catch_up(self) -> None:
        """Read lines other processes (or threads) appended since the last read."""
        try:
            with open(self._file, "rb") as handle, self._lock:
                handle.seek(self._read)
                chunk = handle.read()
                complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being appended waits
                self._read += len(complete)
                for raw in complete.splitlines():
                    self._take(raw)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageError(f"cannot read the owner file ({exc.strerror}); check permissions") from exc

    def _take(self, raw: bytes) -> None:
        try:
            line = json.loads(raw)
            kind, oid, key, mac = line["kind"], line["id"], line["key"], line["mac"]
            version = line.get("version")
        except (ValueError, KeyError, TypeError, AttributeError):
            return  # a damaged line names nobody
        if not all(isinstance(v, str) for v in (kind, oid, key, mac)):
            return
        if version is not None and (type(version) is not int):
            return
        if not hmac.compare_digest(mac, self._line_mac(kind, oid, key, version)):
            return
        self._owners[(kind, oid)] = key
        if kind == "erasure" and version is not None:
            self._by_version[version] = key
        elif kind == "erasure":
            self._unversioned[oid] = key


@contextlib.contextmanager
def _locked(fd: int) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
