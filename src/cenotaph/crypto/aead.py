"""AES-256-GCM sealing, key wrapping and the key-derivation function (one place for each).

A sealed blob is ``nonce (12) || ciphertext || tag (16)``. ``derive`` is HMAC-SHA256 used as a
PRF: every data key of a record is derived from its own random seed and the keys it depends on
(S2), so destroying any one of them makes the record undecryptable.
"""

from __future__ import annotations

import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["KEY_BYTES", "NONCE_BYTES", "Sealer", "derive", "derive_message", "new_key", "open_sealed", "seal"]

KEY_BYTES = 32
NONCE_BYTES = 12
_KEY_LEN = KEY_BYTES.to_bytes(2, "big")  # the length prefix of every 32-byte input to derive


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def derive_message(label: bytes, *inputs: bytes) -> bytes:
    """``label`` then each input prefixed by its 2-byte big-endian length (what ``derive`` MACs)."""
    if all(len(part) == KEY_BYTES for part in inputs):  # the hot path: key material only
        return label + _KEY_LEN + _KEY_LEN.join(inputs) if inputs else label
    return label + b"".join(len(part).to_bytes(2, "big") + part for part in inputs)


def derive(seed: bytes, label: bytes, *inputs: bytes) -> bytes:
    """A 32-byte key from ``seed`` and every input key; changing any input changes the result."""
    # one-shot C HMAC: same bytes as incremental updates
    return hmac.digest(seed, derive_message(label, *inputs), "sha256")


class Sealer:
    """AES-256-GCM under one key; reuse one instance for many operations."""

    __slots__ = ("_aead",)

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal(self, plaintext: bytes, aad: bytes = b"") -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plaintext, aad)

    def seal_with(self, nonce: bytes, plaintext: bytes, aad: bytes = b"") -> bytes:
        """:meth:`seal` with a fresh random ``nonce`` the caller drew (a batch draws all of its
        randomness in one call); never pass a nonce twice."""
        return nonce + self._aead.encrypt(nonce, plaintext, aad)

    def open(self, blob: bytes, aad: bytes = b"") -> bytes | None:
        """The plaintext, or ``None`` if the blob was not sealed by this key with this aad."""
        if len(blob) < NONCE_BYTES + 16:
            return None
        try:
            return self._aead.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad)
        except InvalidTag:
            return None


def seal(key: bytes, plaintext: bytes, aad: bytes = b"") -> bytes:
    return Sealer(key).seal(plaintext, aad)


def open_sealed(key: bytes, blob: bytes, aad: bytes = b"") -> bytes | None:
    return Sealer(key).open(blob, aad)
