"""The key hierarchy (S2) and the in-memory cache of unwrapped keys.

Every data key is random, wrapped by the KEK of the current epoch, and stored wrapped:

- one key per scope path (each prefix of a record's scope),
- one key per subject,
- per record: a *content seed* (in the record row) and a *lineage seed* (in the lineage row,
  which outlives operational expiry).

A record's lineage key is ``L(r) = derive(lineage_seed, L(s1), L(s2), ...)`` over its sources,
and its content key ``K(r) = derive(content_seed, L(r), scope keys root..leaf, subject keys)``.
Destroying any input (a scope, a subject, a source's lineage seed, the record's own seeds)
makes the record undecryptable, transitively through derived records (W3).
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Sequence

from ..errors import KeyProviderError
from .aead import KEY_BYTES, Sealer, derive, derive_message, new_key
from .provider import KeyProvider

__all__ = ["KeyChain", "content_key", "content_key_of", "group_part", "lineage_key"]

_WRAP_AAD = b"cenotaph-dek/1"
LINEAGE_CACHE_LIMIT = 65_536


def lineage_key(seed: bytes, source_keys: Sequence[bytes]) -> bytes:
    return derive(seed, b"lineage", *source_keys)


_SEPARATOR = derive_message(b"", b"|")  # the framed b"|" between scope and subject keys


def content_key(
    seed: bytes, lineage: bytes, scope_keys: Sequence[bytes], subject_keys: Sequence[bytes]
) -> bytes:
    """``derive(seed, b"content", lineage, *scope_keys, b"|", *subject_keys)``, framed without
    the generic per-part loop (this runs for every record sealed or opened)."""
    message = (
        derive_message(b"content", lineage, *scope_keys) + _SEPARATOR + derive_message(b"", *subject_keys)
    )
    return hmac.digest(seed, message, "sha256")


_CONTENT_LABEL = b"content" + KEY_BYTES.to_bytes(2, "big")


def group_part(scope_keys: Sequence[bytes], subject_keys: Sequence[bytes]) -> bytes:
    """What :func:`content_key` MACs after the lineage key: the same for every record of one
    scope and subject set (a *group*), so it is framed once per group and cached."""
    return derive_message(b"", *scope_keys) + _SEPARATOR + derive_message(b"", *subject_keys)


def content_key_of(seed: bytes, lineage: bytes, group: bytes) -> bytes:
    """``content_key(seed, lineage, scope_keys, subject_keys)`` from its group's
    :func:`group_part` (``lineage`` is always a 32-byte key)."""
    return hmac.digest(seed, _CONTENT_LABEL + lineage + group, "sha256")


class KeyChain:
    """Wraps and unwraps data keys under KEK epochs and caches what it unwrapped.

    Caches hold unwrapped scope, subject and lineage keys; :meth:`clear` drops them all and is
    called synchronously by every forget and whenever another process forgot something.
    """

    def __init__(self, provider: KeyProvider) -> None:
        self.provider = provider
        self._lock = threading.RLock()
        self._sealers: dict[int, Sealer] = {}
        self._epoch = provider.current_epoch()
        self.scope_keys: dict[bytes, bytes] = {}
        self.subject_keys: dict[bytes, bytes] = {}
        self.lineage_keys: dict[str, bytes] = {}
        # scope token + subject tokens -> group_part of their keys; dropped with the keys
        self.groups: dict[bytes, bytes] = {}

    @property
    def epoch(self) -> int:
        return self._epoch

    def refresh_epoch(self) -> int:
        """Re-read the current epoch (another process may have rotated); call inside a write txn."""
        self._epoch = self.provider.current_epoch()
        return self._epoch

    def _sealer(self, epoch: int) -> Sealer:
        sealer = self._sealers.get(epoch)
        if sealer is None:
            sealer = Sealer(self.provider.kek(epoch))
            with self._lock:
                self._sealers[epoch] = sealer
        return sealer

    def new_wrapped(self) -> tuple[bytes, bytes, int]:
        """A fresh data key, its wrapped form and the epoch it is wrapped under."""
        key = new_key()
        return key, self._sealer(self._epoch).seal(key, _WRAP_AAD), self._epoch

    def wrap(self, key: bytes, epoch: int | None = None, nonce: bytes | None = None) -> tuple[bytes, int]:
        """``key`` wrapped under ``epoch`` (default: the current one); ``nonce``: fresh random
        bytes the caller drew (see :meth:`Sealer.seal_with`)."""
        epoch = self._epoch if epoch is None else epoch
        sealer = self._sealer(epoch)
        if nonce is None:
            return sealer.seal(key, _WRAP_AAD), epoch
        return sealer.seal_with(nonce, key, _WRAP_AAD), epoch

    def wrap_two(self, first: bytes, second: bytes, n1: bytes, n2: bytes) -> tuple[bytes, bytes, int]:
        """:meth:`wrap` of two keys under the current epoch (a record's two seeds), with the
        fresh nonces ``n1`` and ``n2``: the epoch's sealer looked up once."""
        epoch = self._epoch
        sealer = self._sealer(epoch)
        return sealer.seal_with(n1, first, _WRAP_AAD), sealer.seal_with(n2, second, _WRAP_AAD), epoch

    def unwrap(self, wrapped: bytes | None, epoch: int | None) -> bytes | None:
        """The data key, or ``None`` if it or its epoch was destroyed."""
        if wrapped is None or epoch is None:
            return None
        try:
            sealer = self._sealer(epoch)
        except KeyProviderError:
            return None  # the epoch was destroyed: the key is gone for good
        return sealer.open(wrapped, _WRAP_AAD)

    def forget_epoch_sealers(self) -> None:
        with self._lock:
            self._sealers.clear()

    def drop_destroyed_epochs(self) -> None:
        """Forget the KEKs of epochs the provider no longer holds (destroyed by a rotation in
        another process): a destroyed epoch must not live on in this process's memory."""
        live = set(self.provider.live_epochs())
        with self._lock:
            for epoch in [e for e in self._sealers if e not in live]:
                del self._sealers[epoch]

    def remember_lineage(self, record_id: str, key: bytes) -> None:
        """Cache a lineage key; bounded, since an index build touches every record."""
        if len(self.lineage_keys) >= LINEAGE_CACHE_LIMIT:
            self.lineage_keys.clear()
        self.lineage_keys[record_id] = key

    def remember_group(self, tokens: bytes, part: bytes) -> None:
        """Cache a group's :func:`group_part`; bounded like the lineage keys."""
        if len(self.groups) >= LINEAGE_CACHE_LIMIT:
            self.groups.clear()
        self.groups[tokens] = part

    def clear(self) -> None:
        with self._lock:
            self.scope_keys.clear()
            self.subject_keys.clear()
            self.lineage_keys.clear()
            self.groups.clear()
