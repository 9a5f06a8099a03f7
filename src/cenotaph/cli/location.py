"""What ``--data`` names: a data directory, or a PostgreSQL store (``postgresql://...?schema=``).

A URL is never a path: ``postgresql://`` and ``postgres://`` name a PostgreSQL store, any other
``scheme://`` is refused, and everything else is a data directory. A PostgreSQL store has no data
directory, so what a directory store keeps beside its database lives elsewhere:

- its keyring is the directory ``$CENOTAPH_KEYRING`` names (required: a command without it
  says so and exits 2);
- its API keys (``cenotaph api-keys``, ``serve``, ``mcp --api-keys``) live in that keyring
  directory's ``api-keys/``: one keyring belongs to one store, so the keys of two stores never
  share a ring, and every server given the keyring finds them;
- its streaming replicas are ``$CENOTAPH_REPLICAS``: their URLs, separated by spaces, which every
  command passes on (a purge waits for each; ``doctor`` checks each); ``$CENOTAPH_READ_REPLICAS``
  lists, the same way, replicas that may also serve reads (``read_replicas``: each only once it
  has replayed past every forget the process knows of; a purge waits for these too).

Every message and document names a URL without its password.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cenotaph import LocalKeyring
from cenotaph.operations import (
    KEYRING_ENV,
    default_keyring_location,
    is_postgres_url,
    master_key_from_env,
    names_a_url,
    redacted,
)

__all__ = ["READ_REPLICAS_ENV", "REPLICAS_ENV", "DataLocation", "DataType"]

REPLICAS_ENV = "CENOTAPH_REPLICAS"
READ_REPLICAS_ENV = "CENOTAPH_READ_REPLICAS"
_DIRECTORY = click.Path(file_okay=False, path_type=Path)


@dataclass(frozen=True, slots=True)
class DataLocation:
    """A store as ``--data`` names it: ``path`` (as given) of a data directory, or ``url``."""

    path: Path | None
    url: str | None = None

    @property
    def directory(self) -> Path | None:
        """The data directory, absolute (the engine's checks and the residue scan need that)."""
        return None if self.path is None else self.path.resolve()

    @property
    def shown(self) -> str:
        """How documents name it: the absolute directory, or the URL without its password."""
        if self.url is not None:
            return redacted(self.url)
        assert self.path is not None
        return str(self.path.resolve())

    @property
    def given(self) -> str:
        """How a message quotes it back (``--data {given}``): as given, a URL without its password."""
        return redacted(self.url) if self.url is not None else str(self.path)

    def keyring(self) -> Path:
        """The keyring directory: ``$CENOTAPH_KEYRING``, else (a data directory) its ``keyring``."""
        if self.path is not None:
            return default_keyring_location(self.path)
        named = os.environ.get(KEYRING_ENV)
        if not named:
            raise click.UsageError(
                f"a postgresql:// --data has no data directory to keep its keyring in: set {KEYRING_ENV} "
                "to the store's keyring directory (`cenotaph init` creates one there for a new store)"
            )
        return Path(named)

    def keyring_inside(self) -> bool:
        """Does the keyring live inside the data directory (copying the directory copies the keys)?"""
        if self.path is None:
            return False
        return self.keyring().resolve().is_relative_to(self.path.resolve())

    def provider(self) -> LocalKeyring:
        """The store's keyring, opened (sealed with ``$CENOTAPH_MASTER_KEY`` if that is set)."""
        return LocalKeyring(self.keyring(), master_key=master_key_from_env())

    def api_keys_home(self) -> Path:
        """The directory whose ``api-keys/`` holds the store's API keys: the data directory, or
        (PostgreSQL) the keyring directory."""
        return self.path if self.path is not None else self.keyring()

    def replicas(self) -> list[str]:
        """The streaming replicas ``$CENOTAPH_REPLICAS`` lists (PostgreSQL only)."""
        return self._listed(REPLICAS_ENV)

    def read_replicas(self) -> list[str]:
        """The streaming replicas that may serve reads, ``$CENOTAPH_READ_REPLICAS`` (PostgreSQL only)."""
        return self._listed(READ_REPLICAS_ENV)

    def _listed(self, variable: str) -> list[str]:
        named = os.environ.get(variable, "").split()
        if not named:
            return []
        if self.url is None:
            raise click.UsageError(
                f"{variable} lists the replicas of a PostgreSQL store, and --data is a data "
                f"directory; unset {variable}"
            )
        wrong = [n for n, replica in enumerate(named, 1) if not is_postgres_url(replica)]
        if wrong:  # its text may hold a password: say which entry, never what it says
            raise click.UsageError(
                f"{variable} entry {wrong[0]} is not a postgresql:// URL; list the replicas' URLs, "
                "separated by spaces"
            )
        return named


if TYPE_CHECKING:  # click >= 8.2 types its parameter types; 8.1's is not generic at run time
    _ParamType = click.ParamType[DataLocation, Any]
else:
    _ParamType = click.ParamType


class DataType(_ParamType):
    """The ``--data`` value: a :class:`DataLocation` (a directory is checked as ``click.Path``
    checks one: not a file)."""

    name = "data"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> DataLocation:
        if isinstance(value, DataLocation):
            return value
        text = os.fspath(value)
        if is_postgres_url(text):
            return DataLocation(None, text)
        if names_a_url(text):
            self.fail(
                "a URL, but not a postgresql:// one: give a data directory or "
                "postgresql://user@host/database?schema=NAME",
                param,
                ctx,
            )
        return DataLocation(_DIRECTORY.convert(text, param, ctx))
