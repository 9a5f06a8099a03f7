"""Confinement: the scopes an MCP server's tools may reach (the only place this rule lives).

A server has the agent's working ``scope`` and a ``prefix``, the widest scope it may touch (the
scope itself or one of its ancestors). A tool's optional ``scope`` argument must lie inside the
prefix. Reads of anything outside answer exactly as an empty scope does, so the answer never
depends on what lies outside; writes and forgets outside are refused with the same words
whatever is there. Reads fall through from a scope to its ancestors only down to the prefix.

>>> c = Confinement.of("tenant:acme/user:alice/session:s1", "tenant:acme/user:alice")
>>> [s.path for s in c.chain(c.scope)]
['tenant:acme/user:alice/session:s1', 'tenant:acme/user:alice']
>>> c.inside("tenant:acme/user:bob") is None
True
"""

from __future__ import annotations

from dataclasses import dataclass

from cenotaph import Scope
from cenotaph.errors import InvalidValueError

__all__ = ["Confinement"]


@dataclass(frozen=True, slots=True)
class Confinement:
    scope: Scope
    prefix: Scope

    @classmethod
    def of(cls, scope: str | None, prefix: str | None) -> Confinement:
        """From the command line's ``--scope`` and ``--prefix`` (each defaults to the other)."""
        if scope is None and prefix is None:
            raise InvalidValueError("give --scope (where the agent's memory lives), and optionally --prefix")
        parsed_scope = Scope.parse(scope if scope is not None else prefix)
        parsed_prefix = Scope.parse(prefix) if prefix is not None else parsed_scope
        if not parsed_scope.is_within(parsed_prefix):
            raise InvalidValueError(
                "--prefix must be --scope itself or one of its ancestors (the widest scope the agent may "
                f"touch), e.g. --scope {parsed_prefix.path}/session:s1 --prefix {parsed_prefix.path}"
            )
        return cls(parsed_scope, parsed_prefix)

    def narrowed(self, prefix: Scope) -> Confinement | None:
        """The confinement of a caller bound to ``prefix`` (an API key's): the narrower of the two
        prefixes, the agent's scope if it lies inside it (else that prefix); None if they do not
        overlap (the caller may reach nothing here)."""
        if prefix.is_within(self.prefix):
            return Confinement(self.scope if self.scope.is_within(prefix) else prefix, prefix)
        return self if self.prefix.is_within(prefix) else None

    def inside(self, scope: str | None) -> Scope | None:
        """The scope a tool call names (default: the agent's scope), or None if it is outside the
        prefix. A malformed scope raises InvalidScopeError, whatever it would name."""
        target = self.scope if scope is None else Scope.parse(scope)
        return target if target.is_within(self.prefix) else None

    def chain(self, scope: Scope) -> list[Scope]:
        """``scope`` and its ancestors inside the prefix, nearest first: where a read falls through."""
        return [s for s in reversed(scope.prefixes()) if s.is_within(self.prefix)]

    def outside_message(self) -> str:
        """The refusal for a write or forget outside the prefix: the same whatever lies there."""
        return (
            f"refused: that scope is outside what this server may reach; use a scope inside {self.prefix.path} "
            f"(or leave scope out for {self.scope.path})"
        )
