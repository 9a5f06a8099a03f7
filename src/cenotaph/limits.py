"""The store's input limits: what a write, a forget or a search accepts (the one place they live).

Every surface (HTTP, MCP, the command line, the adapters) states these limits in its own schemas
and help, and the store refuses anything past them with :class:`cenotaph.errors.InvalidValueError`
whatever the surface said:

>>> from cenotaph import limits
>>> limits.MAX_VALUE_BYTES, limits.MAX_K
(1048576, 1000)
"""

from __future__ import annotations

__all__ = [
    "MAX_DERIVED_FROM",
    "MAX_JSON_DEPTH",
    "MAX_K",
    "MAX_KEY_LENGTH",
    "MAX_METADATA_BYTES",
    "MAX_OWNER_LENGTH",
    "MAX_QUERY_CHARS",
    "MAX_SUBJECTS",
    "MAX_SUBJECT_LENGTH",
    "MAX_TTL_SECONDS",
    "MAX_VALUE_BYTES",
]

MAX_VALUE_BYTES = 1 << 20
"""A value's compact UTF-8 JSON encoding, in bytes."""
MAX_KEY_LENGTH = 512
"""A key's length in characters (1 at least, printable)."""
MAX_METADATA_BYTES = 64 << 10
"""A record's metadata, encoded as a value is."""
MAX_SUBJECTS = 64
"""Data subjects named by one record."""
MAX_SUBJECT_LENGTH = 512
"""One subject id's length in characters."""
MAX_TTL_SECONDS = 100 * 365 * 86400.0
"""The longest time to live a write may ask for."""
MAX_DERIVED_FROM = 1024
"""Record ids one record may name as its sources (``derived_from``)."""
MAX_JSON_DEPTH = 256
"""Levels of nesting in a value or metadata (a value that contains itself has no end)."""
MAX_OWNER_LENGTH = 200
"""An owner name's length in characters (who a forget belongs to)."""
MAX_K = 1000
"""Hits one search may ask for."""
MAX_QUERY_CHARS = 10_000
"""A search query's length in characters."""
