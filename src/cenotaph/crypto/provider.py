"""Key providers: where KEK epochs, the erasure secret, the signing key and the forget ledger live.

None of these ever enters the database. :class:`LocalKeyring` keeps them in a 0700 directory:

- ``keyring.json``: epochs, erasure secret, signing key, registered backups. Rewritten
  atomically (temp file, fsync, rename, fsync dir). With ``CENOTAPH_MASTER_KEY`` (64 hex
  characters) set, the file is sealed with AES-256-GCM under that key.
- ``ledger.jsonl``: the content-free forget ledger, one JSON entry a line, appended and fsynced
  before the forget's database transaction commits (W7).

Several processes may share one keyring: every change holds an ``flock`` on ``.lock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..durable import write_all, write_atomically
from ..errors import InvalidValueError, KeyProviderError
from .aead import KEY_BYTES, new_key, open_sealed, seal
from .ledger_hint import LedgerHint, begin_append, end_append

__all__ = [
    "KeyProvider",
    "LocalKeyring",
    "keyring_from_env",
    "keyring_env_location",
    "keyring_from_env_only",
    "keyring_location",
    "master_key_from_env",
    "MASTER_KEY_ENV",
    "KEYRING_ENV",
]

MASTER_KEY_ENV = "CENOTAPH_MASTER_KEY"
KEYRING_ENV = "CENOTAPH_KEYRING"
SEALED_FORMAT = "cenotaph-sealed-keyring/1"  # the "format" of a keyring.json sealed by a master key


@runtime_checkable
class KeyProvider(Protocol):
    """What cenotaph needs from a root of trust. Implement it to use a KMS or an HSM."""

    @property
    def root_of_trust(self) -> str: ...

    def current_epoch(self) -> int: ...

    def kek(self, epoch: int) -> bytes:
        """The KEK of ``epoch``; raises KeyProviderError if it was destroyed or never existed."""
        ...

    def live_epochs(self) -> list[int]: ...

    def new_epoch(self) -> int: ...

    def destroy_epoch(self, epoch: int) -> bool:
        """Destroy a KEK epoch unless a registered backup needs it; return whether it was.
        Deciding and destroying must be one atomic step with respect to ``register_backup``:
        a backup registering an epoch at the same moment must never lose it."""
        ...

    def erasure_secret(self) -> bytes: ...

    def signing_key(self) -> bytes: ...

    def append_ledger(self, entry: Mapping[str, Any]) -> None:
        """Durably append one content-free entry; must be on stable storage when it returns."""
        ...

    def ledger(self) -> list[dict[str, Any]]: ...

    def ledger_mark(self) -> int:
        """A cheap value that changes whenever the ledger grows (e.g. its size)."""
        ...

    def register_backup(self, backup_id: str, epochs: list[int]) -> None: ...

    def release_backup(self, backup_id: str) -> None: ...

    def backups(self) -> dict[str, list[int]]: ...


class LocalKeyring:
    """A keyring directory on the local file system (``root_of_trust == "local-file"``)."""

    def __init__(self, path: str | os.PathLike[str], *, master_key: bytes | None = None) -> None:
        self.path = Path(path)
        self._master = master_key
        if master_key is not None and len(master_key) != KEY_BYTES:
            raise KeyProviderError(f"{MASTER_KEY_ENV} must be {KEY_BYTES * 2} hex characters")
        self._ledger_path = str(self.path / self.LEDGER_FILE)
        self._state: dict[str, Any] = {}
        self._stamp: tuple[int, int, int] | None = None
        self._hint = LedgerHint(self.path / ".lock")
        self._open()

    # -- file handling ---------------------------------------------------------------
    @property
    def _file(self) -> Path:
        return self.path / self.KEYRING_FILE

    @property
    def _ledger_file(self) -> Path:
        return self.path / self.LEDGER_FILE

    def _denied(self, path: Path, exc: OSError, step: str) -> KeyProviderError:
        """The error for an OS refusal on a keyring file: names the file, says what to do."""
        return KeyProviderError(
            f"cannot {step} {path} ({exc.strerror}); this step needs read and write permission on "
            f"the keyring directory {self.path} and its files"
        )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        """Hold the keyring's lock; yields the lock file's descriptor."""
        lock = self.path / ".lock"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise self._denied(lock, exc, "lock") from exc
        with os.fdopen(fd, "r+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield handle.fileno()
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _open(self) -> None:
        try:
            if self.path.is_dir() and not self._file.exists() and self._foreign_files():
                raise KeyProviderError(
                    f"the keyring directory {self.path} holds other files; give the keyring a new or "
                    f"empty directory of its own ({KEYRING_ENV}), which cenotaph makes private (0700)"
                )
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._make_private()
            read_only = self._file.exists() and not os.access(self.path, os.W_OK)
        except OSError as exc:
            raise KeyProviderError(
                f"cannot use the keyring directory {self.path} ({exc.strerror}); check its permissions "
                f"or set {KEYRING_ENV} to the right directory"
            ) from exc
        if read_only:  # read it as it is: every save is an atomic rename, so no lock is needed
            self._load()
            return
        with self._locked():
            self._remove_stale_copies()
            if self._file.exists():
                self._load()
            else:
                self._refuse_if_used()
                self._state = {
                    "format": "cenotaph-keyring/1",
                    "erasure_secret": secrets.token_hex(KEY_BYTES),
                    "signing_key": secrets.token_hex(KEY_BYTES),
                    "epochs": {"1": new_key().hex()},
                    "current": 1,
                    "destroyed": [],
                    "backups": {},
                }
                self._save()

    def _make_private(self) -> None:
        """Take group and other permissions off the directory (never add any: a keyring made
        read-only on purpose stays read-only)."""
        mode = stat.S_IMODE(self.path.stat().st_mode)
        if mode & 0o077:
            try:
                os.chmod(self.path, mode & 0o700)
            except OSError as exc:
                raise KeyProviderError(
                    f"the keyring directory {self.path} is open to other users (mode {mode:04o}) and "
                    f"cannot be made private ({exc.strerror}); chmod 700 it"
                ) from exc

    def _refuse_if_used(self) -> None:
        """A missing keyring.json beside a ledger is lost, not new: a fresh one would hold other
        keys (nothing this keyring protected could be decrypted) and would hide the loss."""
        try:
            used = self._ledger_file.stat().st_size > 0
        except FileNotFoundError:
            used = False
        if used:
            raise KeyProviderError(
                f"{self._file} is missing, but the ledger beside it shows this keyring was in use; "
                "restore keyring.json from your keyring backup (nothing was created: a new keyring "
                "could not decrypt anything this one protected)"
            )

    def _foreign_files(self) -> list[str]:
        """Files in the keyring directory that are not the keyring's own (its lock, its ledger,
        a staged copy): another process initialising it, or a crash during init, leaves those."""
        staged = f".{self._file.name}."
        own = {".lock", self._file.name, self._ledger_file.name}
        return [
            p.name
            for p in self.path.iterdir()
            if p.name not in own and not (p.name.startswith(staged) and p.name.endswith(".tmp"))
        ]

    def _remove_stale_copies(self) -> None:
        """Under the lock no save is running: a staged copy left by a crashed save may hold epochs
        destroyed since, so it is removed (the live file is whole: saves are atomic)."""
        for stale in self.path.glob(f".{self._file.name}.*.tmp"):
            stale.unlink(missing_ok=True)

    def _load(self) -> None:
        try:
            # read and stamp the same file: a save by another process between a read and a
            # separate stat() would stamp the new file on the old contents, never reloaded
            with open(self._file, "rb") as handle:
                raw = handle.read()
                found = os.fstat(handle.fileno())
        except OSError as exc:
            raise KeyProviderError(
                f"cannot read the keyring {self._file} ({exc.strerror}); check its permissions"
            ) from exc
        try:
            doc = json.loads(raw)
            if doc.get("format") == SEALED_FORMAT:
                if self._master is None:
                    raise KeyProviderError(
                        f"the keyring is sealed with a master key; set {MASTER_KEY_ENV} to open it"
                    )
                opened = open_sealed(self._master, bytes.fromhex(doc["sealed"]), b"keyring")
                if opened is None:
                    raise KeyProviderError(f"{MASTER_KEY_ENV} does not open this keyring; use the right key")
                doc = json.loads(opened)
            elif self._master is not None:
                raise KeyProviderError(
                    f"{MASTER_KEY_ENV} is set but the keyring is not sealed; unset it or re-create the keyring"
                )
            _check_state(doc)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KeyProviderError("the keyring file is corrupt; restore it from a trusted copy") from exc
        self._state = doc
        self._stamp = (found.st_ino, found.st_size, found.st_mtime_ns)

    def _refresh(self) -> None:
        try:
            found = self._file.stat()
        except FileNotFoundError as exc:
            raise KeyProviderError(
                f"the keyring file {self._file} disappeared; restore it from a trusted copy"
            ) from exc
        except OSError as exc:
            raise self._denied(self._file, exc, "read") from exc
        if (found.st_ino, found.st_size, found.st_mtime_ns) != self._stamp:
            self._load()

    def _save(self) -> None:
        body = json.dumps(self._state, sort_keys=True).encode()
        if self._master is not None:
            sealed = seal(self._master, body, b"keyring").hex()
            body = json.dumps({"format": SEALED_FORMAT, "sealed": sealed}).encode()
        try:
            write_atomically(self._file, body)
            saved = self._file.stat()
        except OSError as exc:
            raise self._denied(self._file, exc, "write") from exc
        self._stamp = (saved.st_ino, saved.st_size, saved.st_mtime_ns)

    # -- the keyring's own files (``cenotaph keyring``: seal, move, export) ----------------
    KEYRING_FILE = "keyring.json"
    LEDGER_FILE = "ledger.jsonl"

    @property
    def sealed(self) -> bool:
        """Whether keyring.json is sealed under a master key (this instance was opened with it)."""
        return self._master is not None

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the keyring's lock: no process changes its files until the block ends."""
        with self._locked():
            yield

    def reseal(self, master_key: bytes) -> None:
        """Rewrite keyring.json sealed under ``master_key``: one atomic replace (a crash leaves the
        old file or the new one), under the lock, from the newest state on disk."""
        if len(master_key) != KEY_BYTES:
            raise KeyProviderError(f"{MASTER_KEY_ENV} must be {KEY_BYTES * 2} hex characters")
        with self._locked():
            self._load()
            self._remove_stale_copies()  # staged copies of the old file (unsealed, perhaps)
            self._master = master_key
            self._save()

    # -- KeyProvider -----------------------------------------------------------------
    @property
    def root_of_trust(self) -> str:
        return "local-file+master-key" if self._master is not None else "local-file"

    def current_epoch(self) -> int:
        self._refresh()
        return int(self._state["current"])

    def kek(self, epoch: int) -> bytes:
        hexkey = self._state["epochs"].get(str(epoch))
        if hexkey is None:
            self._refresh()
            hexkey = self._state["epochs"].get(str(epoch))
        if hexkey is None:
            raise KeyProviderError(
                f"KEK epoch {epoch} is not in the keyring (destroyed or never created); "
                "data wrapped under it cannot be decrypted"
            )
        return bytes.fromhex(hexkey)

    def live_epochs(self) -> list[int]:
        self._refresh()
        return sorted(int(e) for e in self._state["epochs"])

    def destroyed_epochs(self) -> list[int]:
        self._refresh()
        return sorted(int(e) for e in self._state["destroyed"])

    def new_epoch(self) -> int:
        with self._locked():
            self._load()
            known = [int(e) for e in self._state["epochs"]] + [int(e) for e in self._state["destroyed"]]
            epoch = max(known) + 1
            self._state["epochs"][str(epoch)] = new_key().hex()
            self._state["current"] = epoch
            self._save()
        return epoch

    def destroy_epoch(self, epoch: int) -> bool:
        with self._locked():
            self._load()
            if epoch == int(self._state["current"]):
                raise KeyProviderError("cannot destroy the current KEK epoch; rotate first")
            if any(epoch in epochs for epochs in self._state["backups"].values()):
                return False  # decided under the same lock register_backup takes
            if self._state["epochs"].pop(str(epoch), None) is not None:
                self._state["destroyed"].append(epoch)
                self._save()
            return True

    def erasure_secret(self) -> bytes:
        return bytes.fromhex(self._state["erasure_secret"])

    def signing_key(self) -> bytes:
        return bytes.fromhex(self._state["signing_key"])

    def append_ledger(self, entry: Mapping[str, Any]) -> None:
        line = (json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n").encode()
        with self._locked() as lock_fd:
            try:
                begun = begin_append(lock_fd)  # every process's ledger_hint() moves from here on
                fd = os.open(self._ledger_file, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    size = os.fstat(fd).st_size
                    if size and os.pread(fd, 1, size - 1) != b"\n":
                        line = b"\n" + line  # close a line torn by a crash, keep this entry whole
                    write_all(fd, line)  # a short write (a full disk) must not pass for a whole one
                    os.fsync(fd)
                finally:
                    os.close(fd)
                end_append(lock_fd, begun)
            except OSError as exc:
                raise KeyProviderError(
                    f"cannot append to the forget ledger {self._ledger_file} ({exc.strerror}); the "
                    "forget was not applied (it needs write permission on the keyring directory)"
                ) from exc

    def ledger(self) -> list[dict[str, Any]]:
        try:
            text = self._ledger_file.read_text()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._denied(self._ledger_file, exc, "read") from exc
        entries = []
        for line in text.splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue  # a torn final line from a crash mid-append: that forget never committed
        return entries

    def ledger_since(self, offset: int) -> tuple[list[dict[str, Any]], int] | None:
        """The whole entries appended after byte ``offset`` and the offset after them; ``None``
        if the ledger is shorter than ``offset`` (it was replaced: read it whole again)."""
        try:
            with open(self._ledger_path, "rb") as handle:
                if os.fstat(handle.fileno()).st_size < offset:
                    return None
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            return None if offset else ([], 0)
        whole = data[: data.rfind(b"\n") + 1]  # a line still being appended is read next time
        entries = []
        for line in whole.splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue  # a line torn by a crash mid-append (as in ledger())
        return entries, offset + len(whole)

    def ledger_hint(self) -> bytes | None:
        """Bytes in memory that move whenever an append to the ledger begins or ends, in any
        process (see ``ledger_hint``); ``None`` when there are none to read."""
        return self._hint.stamp()

    def ledger_mark(self) -> int:
        try:
            return os.stat(self._ledger_path).st_size  # a plain str path: this runs before every read
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise self._denied(self._ledger_file, exc, "read") from exc

    def register_backup(self, backup_id: str, epochs: list[int]) -> None:
        with self._locked():
            self._load()
            self._state["backups"][backup_id] = sorted(set(epochs))
            self._save()

    def release_backup(self, backup_id: str) -> None:
        with self._locked():
            self._load()
            if self._state["backups"].pop(backup_id, None) is None:
                raise KeyProviderError("no backup with that id is registered; list them with store.backups()")
            self._save()

    def backups(self) -> dict[str, list[int]]:
        self._refresh()
        return {k: list(v) for k, v in self._state["backups"].items()}


def _check_state(doc: object) -> None:
    """A keyring's decoded contents have the shape this code reads (else ValueError/TypeError)."""
    if not isinstance(doc, dict):
        raise TypeError("not an object")
    for name in ("erasure_secret", "signing_key"):
        if len(bytes.fromhex(doc[name])) != KEY_BYTES:
            raise ValueError(name)
    epochs, current = doc["epochs"], doc["current"]
    if not isinstance(epochs, dict) or not isinstance(current, int) or str(current) not in epochs:
        raise ValueError("epochs")
    for epoch, key in epochs.items():
        if int(epoch) < 1 or len(bytes.fromhex(key)) != KEY_BYTES:
            raise ValueError("epoch key")
    if not isinstance(doc["destroyed"], list) or not all(isinstance(e, int) for e in doc["destroyed"]):
        raise ValueError("destroyed")
    if not isinstance(doc["backups"], dict) or not all(
        isinstance(v, list) and all(isinstance(e, int) for e in v) for v in doc["backups"].values()
    ):
        raise ValueError("backups")


def master_key_from_env(name: str = MASTER_KEY_ENV) -> bytes | None:
    """The master key in ``$name`` (64 hex characters), or None when it is not set."""
    master_hex = os.environ.get(name)
    if master_hex is None:
        return None
    try:  # set but empty (a failed `$(cat file)`) must not mean "unsealed"
        master = bytes.fromhex(master_hex.strip())
    except ValueError as exc:
        raise KeyProviderError(f"{name} must be {KEY_BYTES * 2} hex characters") from exc
    if not master:
        raise KeyProviderError(
            f"{name} is set but empty; set it to the {KEY_BYTES * 2} hex characters of the master "
            "key, or unset it for an unsealed keyring"
        )
    if len(master) != KEY_BYTES:
        raise KeyProviderError(f"{name} must be {KEY_BYTES * 2} hex characters")
    return master


def keyring_from_env(data_dir: Path) -> LocalKeyring:
    """The default provider: ``$CENOTAPH_KEYRING`` or ``<data_dir>/keyring``, sealed if a master key is set."""
    master = master_key_from_env()
    location = keyring_location(data_dir)
    try:
        orphaned = not (location / "keyring.json").exists() and (data_dir / "cenotaph.db").exists()
    except OSError as exc:
        raise KeyProviderError(f"cannot look for the keyring in {location} ({exc.strerror})") from exc
    if orphaned:
        where = "no keyring" if not location.exists() else f"no keyring.json in {location}"
        raise KeyProviderError(
            f"this data directory has a database but {where}; point {KEYRING_ENV} at its keyring, "
            "or restore keyring.json from your keyring backup (without it nothing in the store can "
            "be decrypted; a new keyring is only made for a new store)"
        )
    return LocalKeyring(location, master_key=master)


def keyring_env_location() -> Path:
    """The keyring directory ``$CENOTAPH_KEYRING`` names, for a store with no data directory
    (PostgreSQL); InvalidValueError if it names none."""
    named = os.environ.get(KEYRING_ENV)
    if not named:
        raise InvalidValueError(
            f"a postgresql:// store has no data directory to keep its keyring in: set {KEYRING_ENV} to "
            "the store's keyring directory, or pass key_provider=LocalKeyring(<keyring dir>)"
        )
    return Path(named)


def keyring_from_env_only(where: str, *, store_exists: bool) -> LocalKeyring:
    """The default provider of a store with no data directory (a PostgreSQL schema, named by
    ``where`` in messages): the keyring directory ``$CENOTAPH_KEYRING`` names, sealed if a master
    key is set. A store that exists needs its keyring there: a new one is only made for a new store."""
    location = keyring_env_location()
    master = master_key_from_env()
    try:
        orphaned = store_exists and not (location / LocalKeyring.KEYRING_FILE).exists()
    except OSError as exc:
        raise KeyProviderError(f"cannot look for the keyring in {location} ({exc.strerror})") from exc
    if orphaned:
        raise KeyProviderError(
            f"{where} holds a store but {KEYRING_ENV} names no keyring (no keyring.json in {location}); "
            f"point {KEYRING_ENV} at the store's keyring, or restore keyring.json from your keyring "
            "backup (without it nothing in the store can be decrypted)"
        )
    return LocalKeyring(location, master_key=master)


def keyring_location(data_dir: Path) -> Path:
    """Where the default provider keeps the keyring: ``$CENOTAPH_KEYRING`` or ``<data_dir>/keyring``."""
    return Path(os.environ.get(KEYRING_ENV) or data_dir / "keyring")
