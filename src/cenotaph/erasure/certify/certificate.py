"""Signed erasure certificates: issue with :class:`Signer`, check with :func:`verify_certificate`.

>>> signer = Signer.generate()
>>> fields = dict.fromkeys(REQUIRED_FIELDS, None)
>>> certificate = signer.sign_certificate(fields)
>>> verify_certificate(certificate.to_json(), signer.public_key_hex) == certificate
True

A certificate is a flat JSON object holding at least :data:`REQUIRED_FIELDS` plus ``signature``: the hex
Ed25519 signature over the canonical JSON (:func:`cenotaph.model.canonical_json`, UTF-8 encoded) of every
other field. Extra fields are allowed and are signed like the rest.

**Content-free.** Callers pass only HMAC tokens, request ids, versions, counts, layer states and
timestamps: never a key, scope id, subject id, value, unsalted hash or vector. Nothing here can
tell a token from a name, so this rule is the caller's to keep.

**What is verified.** The signature covers the *meaning* of the certificate, not its bytes as transmitted:
JSON text is parsed and re-serialized canonically before checking. Reformatted whitespace or reordered keys
therefore still verify, while any changed value, added, removed or renamed field fails. Text with duplicate
keys, ``NaN`` or ``Infinity`` is rejected outright, since those have no single meaning. The signature itself
must be exactly 128 lowercase hex characters, so it cannot be re-spelled either.

**The log.** A certificate may carry ``log``: the RFC 9162 leaf hash of its erasure's audit entry, its
index, its inclusion path and a tree head signed by the same key. It is checked before the signature
(so an altered path or head is named as such): the path must lead from the leaf to the head's root.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ...audit.tree_head import check_inclusion, check_tree_head
from ...errors import CertificateError, InvalidValueError
from ...model import Certificate, canonical_json

__all__ = ["CERTIFICATE_FORMAT", "LOG_FIELDS", "REQUIRED_FIELDS", "Signer", "verify_certificate"]

CERTIFICATE_FORMAT = "cenotaph-erasure-certificate/1"
REQUIRED_FIELDS: tuple[str, ...] = (
    "format",
    "request_id",
    "target",
    "target_kind",
    "mode",
    "requested_at",
    "verified_at",
    "forget_version",
    "layers",
    "scan",
    "horizon",
    "horizon_reason",
    "root_of_trust",
    "audit_head",
    "public_key",
)
LOG_FIELDS = ("leaf_index", "leaf_hash", "inclusion_path", "tree_head")
_SIGNATURE = "signature"
_SIGNATURE_HEX = re.compile(r"[0-9a-f]{128}")
_KEY_HEX = re.compile(r"[0-9a-fA-F]{64}")
_KEY_BYTES = 32


class Signer:
    """Issues certificates with one Ed25519 private key (the store's attestation key)."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self._public_hex = _raw_public_bytes(private_key.public_key()).hex()

    @classmethod
    def generate(cls) -> Signer:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_private_bytes(cls, raw32: bytes) -> Signer:
        if not isinstance(raw32, bytes) or len(raw32) != _KEY_BYTES:
            raise InvalidValueError(
                "an Ed25519 private key is exactly 32 raw bytes; pass what Signer.private_bytes() returned"
            )
        return cls(Ed25519PrivateKey.from_private_bytes(raw32))

    def private_bytes(self) -> bytes:
        """The raw 32-byte private key; hand it only to the key provider."""
        return self._key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )

    @property
    def public_key_hex(self) -> str:
        """The raw Ed25519 public key as 64 lowercase hex characters."""
        return self._public_hex

    def sign(self, message: bytes) -> bytes:
        """The raw Ed25519 signature of ``message`` (tree heads use it with their own context string)."""
        return self._key.sign(message)

    def sign_certificate(self, fields: Mapping[str, Any]) -> Certificate:
        """Sign content-free ``fields``; ``format`` and ``public_key`` are set here."""
        body = {**fields, "format": CERTIFICATE_FORMAT, "public_key": self._public_hex}
        if _SIGNATURE in body:
            raise InvalidValueError("certificate fields must not include 'signature'; the signer adds it")
        missing = [name for name in REQUIRED_FIELDS if name not in body]
        if missing:
            raise InvalidValueError(f"certificate fields are missing {', '.join(missing)}; supply every one")
        if not all(isinstance(name, str) for name in body):
            raise InvalidValueError("certificate field names must be strings")
        try:
            message = canonical_json(body).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidValueError(
                "certificate fields must be plain JSON (str, int, float, bool, None, lists, dicts; no NaN)"
            ) from exc
        signed = json.loads(message)  # a detached copy whose to_json() is exactly what was signed
        return Certificate({**signed, _SIGNATURE: self._key.sign(message).hex()})


def verify_certificate(
    certificate: Certificate | str | bytes | Mapping[str, Any], public_key: str | bytes
) -> Certificate:
    """Return the certificate if ``public_key`` signed exactly its fields (else :class:`CertificateError`).

    ``certificate`` is a :class:`Certificate`, its JSON text (str or UTF-8 bytes) or a dict; ``public_key`` is
    the store's public key as 64 hex characters or 32 raw bytes.
    """
    fields = _certificate_fields(certificate)
    _check_shape(fields)
    key_bytes = _public_key_bytes(public_key)
    if bytes.fromhex(fields["public_key"]) != key_bytes:
        raise CertificateError(
            "the certificate was issued by another store (its public_key differs from the key given); "
            "verify it with that store's public key"
        )
    if "log" in fields:  # before the signature, so an altered path or head is named as such
        _check_log(fields["log"], key_bytes)
    body = {name: value for name, value in fields.items() if name != _SIGNATURE}
    try:
        Ed25519PublicKey.from_public_bytes(key_bytes).verify(
            bytes.fromhex(fields[_SIGNATURE]), _canonical_bytes(body)
        )
    except InvalidSignature:
        raise CertificateError(
            "the signature does not match: the certificate was altered or not issued by this key; "
            "obtain the original certificate from the store"
        ) from None
    return Certificate(fields)


def _check_log(log: object, key_bytes: bytes) -> None:
    """The certificate's ``log`` field: its leaf is in the tree its signed head commits to."""
    if not isinstance(log, Mapping) or set(log) != set(LOG_FIELDS):
        raise CertificateError(
            f"the certificate's log must be an object with exactly {', '.join(LOG_FIELDS)}"
        )
    size, root = check_tree_head(log["tree_head"], key_bytes, label="log's tree_head")
    check_inclusion(log["leaf_hash"], log["leaf_index"], log["inclusion_path"], size, root)


def _certificate_fields(certificate: object) -> dict[str, Any]:
    """The certificate's fields as a fresh, plain-JSON dict."""
    if isinstance(certificate, Certificate):
        certificate = certificate.fields
    if isinstance(certificate, str | bytes):
        parsed = _parse_json(certificate)
    elif isinstance(certificate, Mapping):
        # Through text and back: normalizes tuples, detaches the caller's dict, and catches {1: a, "1": b}.
        parsed = _parse_json(_canonical_bytes(dict(certificate)))
    else:
        raise CertificateError(
            f"a certificate is a Certificate, its JSON text or a dict, not {type(certificate).__name__}"
        )
    if not isinstance(parsed, dict):
        raise CertificateError(
            "the certificate JSON must be an object; pass the text store.attest() returned"
        )
    return parsed


def _parse_json(text: str | bytes) -> object:
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return json.loads(text, object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise CertificateError(
            "the certificate is not UTF-8 text; pass the bytes store.attest() returned"
        ) from exc
    except (ValueError, RecursionError) as exc:
        raise CertificateError(
            "the certificate is not valid JSON (or repeats a key, or holds NaN); pass what store.attest() returned"
        ) from exc


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key")
    return obj


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _check_shape(fields: Mapping[str, Any]) -> None:
    missing = [name for name in (*REQUIRED_FIELDS, _SIGNATURE) if name not in fields]
    if missing:
        raise CertificateError(
            f"the certificate is missing {', '.join(missing)}; obtain the complete certificate from the store"
        )
    if fields["format"] != CERTIFICATE_FORMAT:
        raise CertificateError(
            f"unknown certificate format {fields['format']!r}; this version reads {CERTIFICATE_FORMAT!r}"
        )
    signature = fields[_SIGNATURE]
    if not isinstance(signature, str) or not _SIGNATURE_HEX.fullmatch(signature):
        raise CertificateError(
            "the certificate's signature is malformed (expected 128 lowercase hex characters)"
        )
    key = fields["public_key"]
    if not isinstance(key, str) or not _KEY_HEX.fullmatch(key):
        raise CertificateError("the certificate's public_key is malformed (expected 64 hex characters)")


def _public_key_bytes(public_key: object) -> bytes:
    if isinstance(public_key, bytes) and len(public_key) == _KEY_BYTES:
        return public_key
    if isinstance(public_key, str) and _KEY_HEX.fullmatch(public_key):
        return bytes.fromhex(public_key)
    raise CertificateError(
        "the public key is malformed; pass the store's public_key (64 hex characters) or its 32 raw bytes"
    )


def _canonical_bytes(fields: Mapping[str, Any]) -> bytes:
    try:
        return canonical_json(fields).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise CertificateError(
            "the certificate holds a value that is not plain JSON; pass the text store.attest() returned"
        ) from exc


def _raw_public_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
