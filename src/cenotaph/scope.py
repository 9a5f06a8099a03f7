"""Scope paths: parsing, canonical form, ancestors (the only place these rules live).

>>> Scope.parse("tenant:acme/user:alice/session:s1").ancestors()[-1].path
'tenant:acme/user:alice'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from .errors import InvalidScopeError
from .validation import exact_str

__all__ = ["Scope", "default_subjects", "MAX_ID_LENGTH", "MAX_DEPTH"]

MAX_ID_LENGTH = 200
MAX_DEPTH = 32
_KIND = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# a word 'user:x' after a space in an id: almost always two segments joined by a space instead
# of '/' ('tenant:acme user:x'); 'note re: lunch' or 'at 10:30' or 'a:b:c' do not look like one
_SEGMENT_LOOKALIKE = re.compile(r"[a-z][a-z0-9_-]{0,31}:[^:]+")
_SUBJECT_KIND = "user"


def _printable(text: str) -> bool:
    return text.isprintable() and "/" not in text


@dataclass(frozen=True, slots=True)
class Scope:
    """A canonical scope: a tuple of ``(kind, id)`` segments."""

    segments: tuple[tuple[str, str], ...]
    _path: str = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_path", "/".join(f"{kind}:{ident}" for kind, ident in self.segments))

    @classmethod
    def parse(cls, path: object) -> Scope:
        """Parse ``kind:id/kind:id/...``; raise :class:`InvalidScopeError` if malformed."""
        if isinstance(path, Scope):
            return path
        if isinstance(path, str):
            return _parse_cached(exact_str(path))
        return cls._parse(path)

    @classmethod
    def _parse(cls, path: object) -> Scope:
        if not isinstance(path, str):
            raise InvalidScopeError(
                f"scope must be a string like 'tenant:acme/user:alice', got {type(path).__name__}"
            )
        if not path or path.startswith("/") or path.endswith("/") or "//" in path:
            raise InvalidScopeError(
                "scope must be non-empty 'kind:id' segments joined by '/', with no empty segment "
                "and no leading or trailing '/', e.g. 'tenant:acme/user:alice'"
            )
        parts = path.split("/")
        if len(parts) > MAX_DEPTH:
            raise InvalidScopeError(f"scope is deeper than {MAX_DEPTH} segments; use a shallower path")
        return cls(tuple(_parse_segment(part) for part in parts))

    @property
    def path(self) -> str:
        return self._path

    def __str__(self) -> str:
        return self.path

    def prefixes(self) -> list[Scope]:
        """Every prefix from the root down to and including this scope."""
        return list(_prefixes(self))

    def ancestors(self) -> list[Scope]:
        """Proper prefixes, root first."""
        return self.prefixes()[:-1]

    def parent(self) -> Scope | None:
        return Scope(self.segments[:-1]) if len(self.segments) > 1 else None

    def is_within(self, other: Scope) -> bool:
        """True if this scope equals ``other`` or is one of its descendants."""
        return self.segments[: len(other.segments)] == other.segments

    def child(self, kind: str, ident: str) -> Scope:
        return Scope((*self.segments, _parse_segment(f"{kind}:{ident}")))


@lru_cache(maxsize=4096)
def _parse_cached(path: str) -> Scope:
    return Scope._parse(path)


@lru_cache(maxsize=4096)
def _prefixes(scope: Scope) -> tuple[Scope, ...]:
    return tuple(Scope(scope.segments[: n + 1]) for n in range(len(scope.segments)))


def _parse_segment(part: str) -> tuple[str, str]:
    kind, sep, ident = part.partition(":")
    if not sep or not _KIND.fullmatch(kind):
        raise InvalidScopeError(
            "each scope segment must be 'kind:id' with kind matching [a-z][a-z0-9_-]{0,31}, e.g. 'user:alice'"
        )
    if not 1 <= len(ident) <= MAX_ID_LENGTH or not _printable(ident):
        raise InvalidScopeError(f"a scope id must be 1..{MAX_ID_LENGTH} printable characters without '/'")
    if ident != ident.strip(" "):
        raise InvalidScopeError(
            f"the id of scope segment '{kind}:...' starts or ends with a space; remove it "
            "('acme' and 'acme ' would be two different scopes)"
        )
    lookalike = next((w for w in ident.split(" ")[1:] if _SEGMENT_LOOKALIKE.fullmatch(w)), None)
    if lookalike is not None:
        raise InvalidScopeError(
            f"the id of scope segment '{kind}:...' holds ' {lookalike.partition(':')[0]}:...', which "
            "looks like another segment; join segments with '/' (e.g. 'tenant:acme/user:alice')"
        )
    return kind, ident


@lru_cache(maxsize=65_536)
def default_subjects(scope: Scope) -> tuple[str, ...]:
    """The scope's path up to and including each ``user:`` segment."""
    return tuple(
        Scope(scope.segments[: n + 1]).path
        for n, (kind, _) in enumerate(scope.segments)
        if kind == _SUBJECT_KIND
    )
