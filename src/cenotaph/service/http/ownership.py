"""Which API key started each erasure request and made each backup through the server.

The store's requests and backups carry no scope or tenant (they are content-free by design), so
the server remembers who made them: ``api-keys/owners.jsonl``, one line per object, ``{"kind",
"id", "key", "mac"}`` -- ids only, MAC'd under the key ring's pepper (an edited or planted line is
ignored). A key sees a request when the key that made it lies inside its own prefix. Requests
made with the library or the CLI have no owner here, and no key sees them over HTTP.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import json
import os
import threading
from collections.abc import Iterator
from typing import Literal

from ...durable import write_all
from ...errors import StorageError
from ..apikeys import ApiKey, ApiKeyRing

__all__ = ["Ownership"]

Kind = Literal["erasure", "backup"]


class Ownership:
    def __init__(self, ring: ApiKeyRing) -> None:
        self._ring = ring
        self._file = ring.path / "owners.jsonl"
        self._owners: dict[tuple[str, str], str] = {}
        self._read = 0
        self._lock = threading.Lock()

    def _line_mac(self, kind: str, object_id: str, key_id: str) -> str:
        return self._ring.mac("owner", f"{kind}\0{object_id}\0{key_id}".encode())

    def record(self, kind: Kind, object_id: str, key: ApiKey) -> None:
        """Durably note that ``key`` made ``object_id`` (appended and fsynced before it returns)."""
        line = {"kind": kind, "id": object_id, "key": key.id, "mac": self._line_mac(kind, object_id, key.id)}
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
        except (ValueError, KeyError, TypeError):
            return  # a damaged line names nobody
        if all(isinstance(v, str) for v in (kind, oid, key, mac)) and hmac.compare_digest(
            mac, self._line_mac(kind, oid, key)
        ):
            self._owners[(kind, oid)] = key


@contextlib.contextmanager
def _locked(fd: int) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
