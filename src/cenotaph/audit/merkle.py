"""RFC 9162 §2 Merkle trees over the audit entries: root, inclusion and consistency proofs.

>>> leaves = [leaf_hash(bytes([i])) for i in range(7)]
>>> root = tree_root(leaves)
>>> verify_inclusion(leaves[5], 5, 7, inclusion_path(leaves, 5), root)
True
>>> verify_consistency(3, 7, tree_root(leaves[:3]), root, consistency_path(leaves, 3))
True

A leaf hash is ``SHA-256(0x00 || data)``, an interior node ``SHA-256(0x01 || left || right)``; a tree of
``n`` leaves splits at the largest power of two below ``n`` (RFC 9162 §2.1.1), so appending never moves
an existing leaf. Proofs are lists of 32-byte hashes, generated per §2.1.3.1 (inclusion) and §2.1.4.1
(consistency) and checked with the verification algorithms of §2.1.3.2 and §2.1.4.2. Everything here
works on hashes, never on entry contents.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = [
    "EMPTY_ROOT",
    "consistency_path",
    "inclusion_path",
    "leaf_hash",
    "node_hash",
    "tree_root",
    "verify_consistency",
    "verify_inclusion",
]

EMPTY_ROOT = hashlib.sha256(b"").digest()  # RFC 9162 §2.1.1: the hash of an empty list


def leaf_hash(data: bytes) -> bytes:
    """The RFC 9162 leaf hash of ``data``."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The RFC 9162 interior node hash."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def tree_root(leaves: Sequence[bytes]) -> bytes:
    """The Merkle tree hash of the leaf hashes ``leaves`` (:data:`EMPTY_ROOT` when empty)."""
    if not leaves:
        return EMPTY_ROOT
    # bottom-up: pairing adjacent hashes level by level and carrying an odd last one up gives
    # exactly the RFC's left-heavy shape
    level = list(leaves)
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def inclusion_path(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of ``leaves`` (RFC 9162 §2.1.3.1)."""
    if not 0 <= index < len(leaves):
        raise ValueError(f"leaf {index} is not in a tree of {len(leaves)} leaves")
    path: list[bytes] = []
    lo, hi = 0, len(leaves)
    while hi - lo > 1:
        k = _split(hi - lo)
        if index - lo < k:
            path.append(tree_root(leaves[lo + k : hi]))
            hi = lo + k
        else:
            path.append(tree_root(leaves[lo : lo + k]))
            lo += k
    path.reverse()
    return path


def consistency_path(leaves: Sequence[bytes], old_size: int) -> list[bytes]:
    """The proof that the tree of the first ``old_size`` leaves is a prefix of ``leaves`` (§2.1.4.1)."""
    if not 0 <= old_size <= len(leaves):
        raise ValueError(f"a tree of {len(leaves)} leaves has no prefix of {old_size}")
    if old_size in (0, len(leaves)):
        return []
    return _subproof(old_size, leaves, True)


def _subproof(m: int, leaves: Sequence[bytes], complete: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if complete else [tree_root(leaves)]
    k = _split(n)
    if m <= k:
        return [*_subproof(m, leaves[:k], complete), tree_root(leaves[k:])]
    return [*_subproof(m - k, leaves[k:], False), tree_root(leaves[:k])]


def verify_inclusion(leaf: bytes, index: int, tree_size: int, path: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2: does ``path`` lead from ``leaf`` at ``index`` to ``root`` of ``tree_size``?"""
    if not 0 <= index < tree_size:
        return False
    fn, sn = index, tree_size - 1
    r = leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: does ``proof`` show the tree ``old_root`` of ``old_size`` is a prefix of
    the tree ``new_root`` of ``new_size``?"""
    if not 0 <= old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        return not proof and old_root == EMPTY_ROOT
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is itself a node of the new tree
        path.insert(0, old_root)
    if not path:
        return False
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == old_root and sr == new_root and sn == 0
