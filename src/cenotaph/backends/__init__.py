"""Storage backends. Each implements :class:`cenotaph.backends.base.Backend`; the store holds the policy.

What a backend does to bytes is its ``physical`` part (:mod:`cenotaph.backends.physical`). A data
directory (a path location) holds the embedded SQLite backend: :func:`directory_format` is how its
files are laid out and checked, for the code that works on a directory without opening a store
(restore, the command line), which so never imports a backend module itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .physical import DirectoryFormat

__all__ = ["directory_format", "looks_like_store"]


def directory_format() -> DirectoryFormat:
    """How a data directory's files are laid out and checked (SQLite's)."""
    from .sqlite.physical import SQLITE_FORMAT  # on first use: importing the package loads no engine

    return SQLITE_FORMAT


def looks_like_store(path: Path) -> bool:
    """Does the directory ``path`` hold a store (its database, not merely a keyring)?"""
    return directory_format().holds_store(path)
