"""Where a LangGraph namespace lives in cenotaph, and which subjects its items carry.

A namespace ``("memories", "alice", "prefs")`` under the root scope ``app:langgraph`` is the scope
``app:langgraph/ns:memories/ns:alice/ns:prefs/items:_``. Every namespace label becomes one ``ns:``
segment (percent-encoded where cenotaph's scope ids cannot hold it), and the items themselves sit
in a final ``items:_`` segment: no namespace's item scope is an ancestor or descendant of
another's, so deleting a key in ``("a",)`` never reaches the same key in ``("a", "b")`` (a
cenotaph forget covers a scope's subtree) and a read never falls through between namespaces,
while a prefix search still lists the prefix's subtree.

The caller says which label names the user with patterns such as ``("memories", "{user_id}")``:
an item whose namespace matches carries the subject ``<root>/user:<label>``, the subject
cenotaph gives its own records in scope ``<root>/user:<label>/...``, so ``forget_subject`` of
that string erases the user's LangGraph items and the user's native cenotaph records at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langgraph.store.base import InvalidNamespaceError

from cenotaph import Scope
from cenotaph.errors import InvalidScopeError, InvalidValueError

from .._labels import decode_label, encode_label

__all__ = ["NamespaceMap", "UserPattern"]

LABEL_KIND = "ns"
ITEMS_SEGMENT = "items:_"
_ANY = "*"


@dataclass(frozen=True, slots=True)
class UserPattern:
    """``("memories", "{user_id}")``: literal labels, ``*`` for any label, one ``{placeholder}``."""

    labels: tuple[str, ...]
    position: int

    @classmethod
    def parse(cls, pattern: Sequence[str]) -> UserPattern:
        if isinstance(pattern, str) or not all(isinstance(p, str) and p for p in pattern):
            raise InvalidValueError(
                'a user pattern is a tuple of namespace labels, e.g. ("memories", "{user_id}")'
            )
        holes = [i for i, p in enumerate(pattern) if p.startswith("{") and p.endswith("}")]
        if len(holes) != 1:
            raise InvalidValueError(
                'a user pattern names the user with exactly one "{placeholder}" label, '
                'e.g. ("memories", "{user_id}")'
            )
        return cls(tuple(pattern), holes[0])

    def user(self, namespace: tuple[str, ...]) -> str | None:
        """The label naming the user in ``namespace``, if the pattern matches it."""
        if len(namespace) < len(self.labels):
            return None
        for i, want in enumerate(self.labels):
            if i != self.position and want != _ANY and namespace[i] != want:
                return None
        return namespace[self.position]


class NamespaceMap:
    """Namespaces <-> item scopes, under one root scope."""

    def __init__(self, root: str, users: Sequence[Sequence[str]] = ()) -> None:
        self.root = Scope.parse(root)
        self.root_text = str(self.root)
        if isinstance(users, str):
            raise InvalidValueError('users takes a list of patterns, e.g. [("memories", "{user_id}")]')
        self.patterns = tuple(UserPattern.parse(p) for p in users)
        self._decoded: dict[
            str, tuple[str, ...] | None
        ] = {}  # item scope -> namespace (a search decodes many)

    def prefix_scope(self, prefix: tuple[str, ...]) -> str:
        """The scope whose subtree holds every namespace starting with ``prefix``."""
        return self._checked(prefix, [self.root_text, *(f"{LABEL_KIND}:{encode_label(x)}" for x in prefix)])

    def item_scope(self, namespace: tuple[str, ...]) -> str:
        labels = (f"{LABEL_KIND}:{encode_label(x)}" for x in namespace)
        return self._checked(namespace, [self.root_text, *labels, ITEMS_SEGMENT])

    @staticmethod
    def _checked(namespace: tuple[str, ...], segments: list[str]) -> str:
        try:
            return str(Scope.parse("/".join(segments)))
        except InvalidScopeError as exc:
            raise InvalidNamespaceError(
                f"Namespace {namespace} cannot be stored in cenotaph ({exc}); labels are at most 200 "
                "characters once encoded, and root scope plus labels at most 31 segments."
            ) from None

    def namespace(self, scope: str) -> tuple[str, ...] | None:
        """The namespace whose items live in ``scope``; None for a scope that is not an item scope."""
        try:
            return self._decoded[scope]
        except KeyError:
            pass
        if len(self._decoded) >= 65536:
            self._decoded.clear()
        found = self._decoded[scope] = self._parse(scope)
        return found

    def drop_cache(self) -> None:
        """Forget the decoded names (after a subject erasure: they may name the erased user)."""
        self._decoded.clear()

    def _parse(self, scope: str) -> tuple[str, ...] | None:
        head, _, rest = scope.partition(self.root_text + "/")
        if head or not rest.endswith(ITEMS_SEGMENT):
            return None
        segments = rest[: -len(ITEMS_SEGMENT)].rstrip("/").split("/") if rest != ITEMS_SEGMENT else []
        labels = []
        for segment in segments:
            kind, _, ident = segment.partition(":")
            if kind != LABEL_KIND:
                return None
            labels.append(decode_label(ident))
        return tuple(labels)

    def subject(self, user: str) -> str:
        """The subject a user's items carry (see the module docstring)."""
        try:
            return str(Scope.parse(f"{self.root_text}/user:{encode_label(user)}"))
        except InvalidScopeError as exc:
            raise InvalidValueError(f"that user id cannot name a subject: {exc}") from None

    def subjects(self, namespace: tuple[str, ...]) -> list[str]:
        users = {p.user(namespace) for p in self.patterns}
        return sorted(self.subject(u) for u in users if u is not None)
