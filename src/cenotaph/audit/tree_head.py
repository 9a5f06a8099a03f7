"""Signed tree heads and the proofs a witness or an auditor checks against them.

A tree head is ``{"tree_size", "root_hash", "timestamp", "signature"}``: the RFC 9162 root (hex) of the
first ``tree_size`` audit entries, when it was signed (ISO-8601 UTC), and the store's Ed25519 signature
(hex) over :data:`HEAD_CONTEXT` followed by the canonical JSON of the other three fields. The context
string keeps a head's signature from ever being read as a certificate's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..errors import CertificateError
from ..model import canonical_json
from . import merkle

__all__ = [
    "HEAD_CONTEXT",
    "TREE_HEAD_FIELDS",
    "check_consistency",
    "check_inclusion",
    "check_tree_head",
    "sign_tree_head",
]

HEAD_CONTEXT = b"cenotaph-tree-head/1\n"
TREE_HEAD_FIELDS = ("tree_size", "root_hash", "timestamp", "signature")
_HASH_HEX = re.compile(r"[0-9a-f]{64}")
_SIGNATURE_HEX = re.compile(r"[0-9a-f]{128}")
_KEY_HEX = re.compile(r"[0-9a-fA-F]{64}")


def sign_tree_head(
    tree_size: int, root: bytes, timestamp: str, sign: Callable[[bytes], bytes]
) -> dict[str, Any]:
    """A signed head; ``sign`` is the store's Ed25519 signing function."""
    body = {"tree_size": tree_size, "root_hash": root.hex(), "timestamp": timestamp}
    return {**body, "signature": sign(_message(body)).hex()}


def _message(body: Mapping[str, Any]) -> bytes:
    return HEAD_CONTEXT + canonical_json(dict(body)).encode("utf-8")


def check_tree_head(head: object, public_key: str | bytes, *, label: str = "tree head") -> tuple[int, bytes]:
    """``(tree_size, root)`` of a head ``public_key`` signed; else :class:`CertificateError` saying why."""
    if isinstance(head, str | bytes):
        try:
            head = json.loads(head)
        except ValueError:
            raise CertificateError(
                f"the {label} is not valid JSON; pass a head exactly as the store signed it"
            ) from None
    if not isinstance(head, Mapping) or set(head) != set(TREE_HEAD_FIELDS):
        raise CertificateError(f"the {label} must be an object with exactly {', '.join(TREE_HEAD_FIELDS)}")
    size, root, timestamp, signature = (head[name] for name in TREE_HEAD_FIELDS)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise CertificateError(f"the {label}'s tree_size must be an integer >= 0")
    if not isinstance(root, str) or not _HASH_HEX.fullmatch(root):
        raise CertificateError(f"the {label}'s root_hash must be 64 lowercase hex characters")
    if not isinstance(timestamp, str):
        raise CertificateError(f"the {label}'s timestamp must be an ISO-8601 string")
    if not isinstance(signature, str) or not _SIGNATURE_HEX.fullmatch(signature):
        raise CertificateError(f"the {label}'s signature must be 128 lowercase hex characters")
    body = {"tree_size": size, "root_hash": root, "timestamp": timestamp}
    try:
        Ed25519PublicKey.from_public_bytes(_key_bytes(public_key)).verify(
            bytes.fromhex(signature), _message(body)
        )
    except InvalidSignature:
        raise CertificateError(
            f"the {label}'s signature does not match: it was altered or not signed by this store's key"
        ) from None
    return size, bytes.fromhex(root)


def check_inclusion(leaf_hash: object, index: object, path: object, size: int, root: bytes) -> None:
    """Raise :class:`CertificateError` unless ``path`` leads from ``leaf_hash`` at ``index`` to ``root``."""
    leaf = _hash_bytes(leaf_hash, "leaf_hash")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise CertificateError("the log's leaf_index must be an integer >= 0")
    hashes = _hash_list(path, "inclusion_path")
    if not merkle.verify_inclusion(leaf, index, size, hashes, root):
        raise CertificateError(
            f"the log's inclusion_path does not lead from leaf {index} to the root of the signed tree head "
            f"(size {size}): the path or the leaf was altered"
        )


def check_consistency(
    old_head: object, new_head: object, proof: object, public_key: str | bytes
) -> tuple[int, int]:
    """Check ``new_head`` extends ``old_head`` (both signed by ``public_key``); return both sizes.

    Raises :class:`CertificateError` naming both sizes when the log was truncated, rolled back,
    rewritten or forked."""
    old_size, old_root = check_tree_head(old_head, public_key, label="old tree head")
    new_size, new_root = check_tree_head(new_head, public_key, label="new tree head")
    if new_size < old_size:
        raise CertificateError(
            f"the log shrank from {old_size} to {new_size} entries: it was truncated or rolled back"
        )
    hashes = _hash_list(proof, "consistency proof")
    if not merkle.verify_consistency(old_size, new_size, old_root, new_root, hashes):
        what = (
            "forked (two heads of the same size with different roots)"
            if old_size == new_size
            else "rewritten"
        )
        raise CertificateError(
            f"the log of {new_size} entries does not extend the one of {old_size} entries: "
            f"its history was {what}"
        )
    return old_size, new_size


def _hash_bytes(value: object, name: str) -> bytes:
    if not isinstance(value, str) or not _HASH_HEX.fullmatch(value):
        raise CertificateError(f"the log's {name} must be 64 lowercase hex characters")
    return bytes.fromhex(value)


def _hash_list(value: object, name: str) -> list[bytes]:
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise CertificateError(f"the {name} must be a list of hex hashes")
    return [_hash_bytes(item, name) for item in value]


def _key_bytes(public_key: object) -> bytes:
    if isinstance(public_key, bytes) and len(public_key) == 32:
        return public_key
    if isinstance(public_key, str) and _KEY_HEX.fullmatch(public_key):
        return bytes.fromhex(public_key)
    raise CertificateError(
        "the public key is malformed; pass the store's public_key (64 hex characters) or its 32 raw bytes"
    )
