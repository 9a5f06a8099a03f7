"""What operators' tools need beyond :class:`cenotaph.Store`: locations, keyrings, health checks.

The command line, the HTTP server and anything an operator builds on cenotaph use this module
and the :mod:`cenotaph` package, never the engine's internals, so a backend or the key provider
can change behind them. It holds:

- **locations**: whether a data directory or a ``postgresql://`` URL holds a store
  (:func:`holds_store`), how a URL is recognised (:func:`is_postgres_url`, :func:`names_a_url`)
  and shown without its password (:func:`redacted`), and the schema a URL without ``?schema=``
  names (:data:`POSTGRES_DEFAULT_SCHEMA`);
- **keyrings**: the environment variables that name a keyring and its master key
  (:data:`KEYRING_ENV`, :data:`MASTER_KEY_ENV`), the default keyring of a data directory, and
  moving, exporting, importing and sealing keyring files;
- **health**: the doctor's checks (:class:`Check`), of a data directory's engine
  (:func:`directory_format`) and of a PostgreSQL server (:func:`postgres_schema_state`,
  :func:`postgres_server_checks`, :func:`postgres_version_checks`);
- **restores and residue**: whether a restore committed (:func:`restore_committed`), and a scan
  of a directory's every file for texts (:func:`scan_for_texts`);
- **a service's own files**: keys derived from the key provider for what a service keeps beside
  the store (:func:`service_key`), sealing under one (:class:`Sealer`), and durable writes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from .backends import (
    POSTGRES_DEFAULT_SCHEMA,
    is_postgres_url,
    locate,
    looks_like_store,
    names_a_url,
    redacted,
)
from .backends import directory_format as _directory_format
from .backends import postgres_health as _postgres_health
from .backends.physical import Check, DirectoryFormat
from .crypto.aead import Sealer
from .crypto.keyring_files import export_keyring, import_keyring, keyring_is_sealed, move_keyring
from .crypto.provider import KEYRING_ENV, MASTER_KEY_ENV, KeyProvider, LocalKeyring, master_key_from_env
from .crypto.provider import keyring_from_env as _keyring_from_env
from .crypto.provider import keyring_location as _keyring_location
from .durable import write_all, write_atomically
from .erasure.lifecycle.restoring import restore_committed as _restore_committed
from .erasure.proof.scanner import ResidueScanner, ScanResult, text_probes
from .store import service_key as _service_key

if TYPE_CHECKING:  # importing it needs the PostgreSQL driver
    from .backends.postgres.health import SchemaState as _SchemaState

__all__ = [
    "KEYRING_ENV",
    "MASTER_KEY_ENV",
    "POSTGRES_DEFAULT_SCHEMA",
    "Check",
    "DirectoryFormat",
    "ScanResult",
    "Sealer",
    "default_keyring_location",
    "directory_format",
    "export_keyring",
    "holds_store",
    "import_keyring",
    "is_postgres_url",
    "keyring_from_env",
    "keyring_is_sealed",
    "master_key_from_env",
    "move_keyring",
    "names_a_url",
    "postgres_schema_state",
    "postgres_server_checks",
    "postgres_version_checks",
    "redacted",
    "restore_committed",
    "scan_for_texts",
    "service_key",
    "write_all",
    "write_atomically",
]


# -- locations ---------------------------------------------------------------------------
def holds_store(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` holds a store now: a data directory its database (not merely a
    keyring), a ``postgresql://`` URL a schema with a store (its server is asked). Nothing is
    created or opened."""
    if is_postgres_url(location):
        return locate(str(location)).survey().existing
    return looks_like_store(Path(location))


# -- keyrings ----------------------------------------------------------------------------
def default_keyring_location(data_dir: Path) -> Path:
    """The keyring a data directory's store uses when ``CENOTAPH_KEYRING`` names none."""
    return _keyring_location(data_dir)


def keyring_from_env(data_dir: Path) -> LocalKeyring:
    """The keyring ``cenotaph.open(data_dir)`` would use: ``CENOTAPH_KEYRING``'s, else the data
    directory's own, sealed with ``CENOTAPH_MASTER_KEY`` if that is set."""
    return _keyring_from_env(data_dir)


# -- health ------------------------------------------------------------------------------
def directory_format() -> DirectoryFormat:
    """How a data directory's files are laid out and checked, known without opening a store:
    the doctor's engine checks, and what ``cenotaph demo`` reads straight from the files."""
    return _directory_format()


def postgres_schema_state(url: str) -> _SchemaState:
    """The server a ``postgresql://`` URL names and what its schema holds (a store, a restore
    that did not finish, nothing); refused with :class:`cenotaph.errors.InvalidValueError` if the
    PostgreSQL driver is not installed, :class:`cenotaph.errors.StorageError` if it cannot connect."""
    state: _SchemaState = _postgres_health().url_state(url)
    return state


def postgres_server_checks(url: str, replicas: list[str] | tuple[str, ...]) -> list[Check]:
    """The doctor's checks of a PostgreSQL store's server: role privileges, each replica's lag,
    when VACUUM is due."""
    checks: list[Check] = _postgres_health().url_checks(url, replicas)
    return checks


def postgres_version_checks() -> list[Check]:
    """The PostgreSQL driver's versions, for the doctor's report."""
    checks: list[Check] = _postgres_health().version_checks()
    return checks


# -- restores and residue ------------------------------------------------------------------
def restore_committed(target: Path) -> bool:
    """Whether ``target`` holds a restored store that committed (it may serve; keep it), not a
    restore that was interrupted before its first commit."""
    return _restore_committed(target)


def scan_for_texts(directory: Path, *texts: str) -> ScanResult:
    """Search every file under ``directory`` for each text as UTF-8, UTF-16-LE and hex, with a
    positive control (a planted copy must be found). The result counts files, bytes and matches
    and names the matching files; its ``matched_probes`` are the texts' forms, not evidence to
    show or keep."""
    probes = [probe for text in texts for probe in text_probes(text)]
    return ResidueScanner(probes).scan(directory)


# -- a service's own files -----------------------------------------------------------------
def service_key(provider: KeyProvider, purpose: str) -> bytes:
    """A 32-byte key for ``purpose`` derived from the key provider's erasure secret, as
    :meth:`cenotaph.Store.service_key` gives it, without opening a store: for what a service keeps
    beside the store (API key bindings, owners, cursors), so the data directory alone does not
    give it."""
    return _service_key(provider, purpose)
