"""One MCP connection = one store session (W6), plus the forgets that connection issued.

What the agent reads through a connection joins that connection's read set, and everything it
writes afterwards records the read set as ``derived_from``: a summary written from a note dies
with the note (W3), and a summary written after the note was forgotten is refused. The
connection's forgets are its session's owner's, so a write issued after one of them returned may
re-open exactly what it forgot (both rules are the store session's: ``cenotaph.session``).

What a connection is depends on the transport: a stdio process or an in-memory client is one
connection; over streamable HTTP a legacy session (``Mcp-Session-Id``) is one, and the
sessionless 2026 protocol, which has no connection at all, gets one per principal (the API key,
or the whole server on loopback without keys): every request of that principal shares one read
set. That taints more than a true connection would, never less.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Hashable, Mapping

from cenotaph import Store, StoreSession
from cenotaph.errors import InvalidValueError

from ..apikeys import ApiKey
from .confinement import Confinement

__all__ = ["AgentConnection", "ConnectionRegistry", "STREAM"]

STREAM = "stream"  # the identity of the one connection of a stdio or in-memory stream
SESSION_HEADER = "mcp-session-id"


class AgentConnection:
    """The state of one MCP connection: what it may reach and its store session, whose owner is
    this connection alone (its forgets are the ones its writes may re-open)."""

    def __init__(self, store: Store, reach: Confinement) -> None:
        self.store = store
        self.reach = reach
        self.session: StoreSession = store.session(
            reach.scope.path, owner="mcp-connection:" + secrets.token_hex(16)
        )
        self.last_used = time.monotonic()

    def close(self) -> None:
        self.session.close()


class ConnectionRegistry:
    """The connections of one stream (exactly one) or of one HTTP server (one per session or
    principal). Legacy HTTP sessions the SDK has dropped for idleness are dropped here too."""

    def __init__(
        self, store: Store, reach: Confinement, *, session_idle_seconds: float | None = None
    ) -> None:
        self._store = store
        self._reach = reach
        self._idle = session_idle_seconds
        self._connections: dict[Hashable, AgentConnection] = {}
        self._lock = threading.Lock()

    def connection(self, headers: Mapping[str, str] | None, key: ApiKey | None) -> AgentConnection:
        """The connection of a request: by its transport (``headers``) and API key, whose prefix
        bounds what it may reach."""
        identity = identity_of(headers, None if key is None else key.id)
        with self._lock:
            self._expire()
            found = self._connections.get(identity)
            if found is None:
                reach = self._reach if key is None else self._reach.narrowed(key.scope)
                if reach is None:  # the gate refuses such keys before any tool runs
                    raise InvalidValueError("this API key's prefix is outside what this server serves")
                found = self._connections[identity] = AgentConnection(self._store, reach)
            found.last_used = time.monotonic()
            return found

    def _expire(self) -> None:
        if self._idle is None:
            return
        # only legacy sessions end; a principal's sessionless connection never does (its taint must stay)
        cutoff = time.monotonic() - self._idle
        for identity, conn in list(self._connections.items()):
            if isinstance(identity, tuple) and identity[1] is not None and conn.last_used < cutoff:
                del self._connections[identity]
                conn.close()

    def close(self) -> None:
        with self._lock:
            for conn in self._connections.values():
                conn.close()
            self._connections.clear()


def identity_of(headers: Mapping[str, str] | None, principal: str | None) -> Hashable:
    """Which connection a request belongs to: the stream's, a legacy HTTP session's, or its
    principal's (sessionless HTTP). ``principal`` is the API key id, or None on loopback."""
    if headers is None:
        return STREAM
    return (principal, headers.get(SESSION_HEADER))
