"""Which API key started each erasure request and made each backup through the server.

The store's requests and backups carry no scope or tenant (they are content-free by design), so
the server remembers who made them: ``api-keys/owners.jsonl``, one line per object, ``{"kind",
"id", "key", "mac"}`` -- ids only. Each line is MAC'd
(HMAC-SHA256) under a key derived from the store's key provider for this file alone
(:meth:`ApiKeyRing.service_key`), never under anything kept in ``api-keys/``: whoever can write
that directory (and read its pepper) still cannot make a line that names their key as a
request's or backup's maker, and a line minted by another store (another keyring) does not verify
here. A line that does not verify names nobody and is ignored. A key sees a request (and
releases a backup) when the key that made it lies inside its own prefix. Requests made with the
library or the CLI have no owner here: no key sees them over HTTP.

Who may *lift* a forget is not this file's to say: every forget made through the server names its
API key as its owner in the store itself (``forget(..., owner=...)``, kept by the key provider's
ledger), and the reauthorization route asks the store (``reauthorize(..., owner=...)``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import threading
from collections.abc import Iterator
from typing import Any, Literal

from cenotaph.operations import write_all

from ...errors import StorageError
from ..apikeys import ApiKey, ApiKeyRing

__all__ = ["Ownership"]

Kind = Literal["erasure", "backup"]
PURPOSE = "http-owners"  # the provider-derived key this file's lines are MAC'd under
_MAC_CONTEXT = b"cenotaph-owner-line/3\0"


class Ownership:
    def __init__(self, ring: ApiKeyRing) -> None:
        self._mac_key = ring.service_key(PURPOSE)
        self._file = ring.path / "owners.jsonl"
        self._owners: dict[tuple[str, str], str] = {}
        self._read = 0
        self._lock = threading.Lock()

    def _line_mac(self, kind: str, object_id: str, key_id: str) -> str:
        body = json.dumps([kind, object_id, key_id], separators=(",", ":")).encode()
        return hmac.new(self._mac_key, _MAC_CONTEXT + body, hashlib.sha256).hexdigest()

    def record(self, kind: Kind, object_id: str, key: ApiKey) -> None:
        """Durably note that ``key`` made ``object_id``, appended and fsynced before it returns."""
        line: dict[str, Any] = {"kind": kind, "id": object_id, "key": key.id}
        line["mac"] = self._line_mac(kind, object_id, key.id)
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
        except (ValueError, KeyError, TypeError, AttributeError):
            return  # a damaged line names nobody
        if not all(isinstance(v, str) for v in (kind, oid, key, mac)):
            return
        if not hmac.compare_digest(mac, self._line_mac(kind, oid, key)):
            return
        self._owners[(kind, oid)] = key


@contextlib.contextmanager
def _locked(fd: int) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
