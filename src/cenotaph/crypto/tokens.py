"""HMAC-SHA256 tokens: the only form in which names reach the database (W4).

Tokens are keyed by the store's erasure secret, which the key provider holds, so a stolen
database file cannot confirm a guessed scope, key or subject, and two stores never produce the
same token for the same name. Composite targets (a key under a scope) are built from tokens
alone, so recovery can recompute coverage without any plaintext.
"""

from __future__ import annotations

import hmac
from functools import lru_cache

from ..scope import Scope

__all__ = ["TokenMaker"]


class TokenMaker:
    """Computes every token of one store. Thread-safe (pure functions with a cache)."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._cached = lru_cache(maxsize=65536)(self._mac)
        self._chains = lru_cache(maxsize=4096)(self._chain)

    def _mac(self, label: bytes, data: bytes) -> bytes:
        return hmac.digest(self._secret, label + b"\0" + data, "sha256")  # one-shot C HMAC

    def scope(self, scope: Scope) -> bytes:
        """Token of one scope path; also the target of a scope tombstone (covers its subtree)."""
        return self._cached(b"scope", scope.path.encode())

    def scope_chain(self, scope: Scope) -> tuple[bytes, ...]:
        """Tokens of every prefix of ``scope``, root first (cached per path: every write and
        read needs them)."""
        return self._chains(scope.path)

    def _chain(self, path: str) -> tuple[bytes, ...]:
        return tuple(self.scope(p) for p in Scope.parse(path).prefixes())

    def key(self, key: str) -> bytes:
        return self._cached(b"key", key.encode())

    def subject(self, subject: str) -> bytes:
        """Token of a subject; also the target of a subject tombstone."""
        return self._cached(b"subject", subject.encode())

    def key_subtree(self, scope_token: bytes, key_token: bytes) -> bytes:
        """Target of a key tombstone covering ``key`` in a scope and all its descendants."""
        return self._cached(b"key-subtree", scope_token + key_token)

    def key_exact(self, scope_token: bytes, key_token: bytes) -> bytes:
        """Target of a key tombstone covering ``key`` in exactly one scope (include_ancestors)."""
        return self._cached(b"key-exact", scope_token + key_token)

    def owner(self, owner: str) -> bytes:
        """Token of a forget's owner (an API key, an MCP connection, an adapter): the ledger
        records who made each forget without naming them."""
        return self._cached(b"owner", owner.encode())

    def reauth(self, secret_token: str) -> bytes:
        """What the database stores of a one-time reauthorization token (never the token)."""
        return self._mac(b"reauth", secret_token.encode())
