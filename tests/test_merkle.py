"""RFC 9162 §2 Merkle trees, checked against an independent implementation written from the RFC's
recursive definitions (a few lines of hashlib), for every tree size up to 40 and every index/prefix."""

from __future__ import annotations

import hashlib

import pytest

from cenotaph.audit import merkle


def _mth(data: list[bytes]) -> bytes:
    """MTH(D[n]) of RFC 9162 §2.1.1, over the leaves' data."""
    if not data:
        return hashlib.sha256(b"").digest()
    if len(data) == 1:
        return hashlib.sha256(b"\x00" + data[0]).digest()
    k = 1
    while k * 2 < len(data):
        k *= 2
    return hashlib.sha256(b"\x01" + _mth(data[:k]) + _mth(data[k:])).digest()


def _path(m: int, data: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) of §2.1.3.1."""
    if len(data) == 1:
        return []
    k = 1
    while k * 2 < len(data):
        k *= 2
    if m < k:
        return [*_path(m, data[:k]), _mth(data[k:])]
    return [*_path(m - k, data[k:]), _mth(data[:k])]


def _subproof(m: int, data: list[bytes], b: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b) of §2.1.4.1."""
    if m == len(data):
        return [] if b else [_mth(data)]
    k = 1
    while k * 2 < len(data):
        k *= 2
    if m <= k:
        return [*_subproof(m, data[:k], b), _mth(data[k:])]
    return [*_subproof(m - k, data[k:], False), _mth(data[:k])]


DATA = [f"entry {i}".encode() for i in range(40)]
LEAVES = [merkle.leaf_hash(d) for d in DATA]


def test_leaf_and_node_hashes_are_rfc_9162s() -> None:
    assert merkle.leaf_hash(b"x") == hashlib.sha256(b"\x00x").digest()
    assert merkle.node_hash(b"a", b"b") == hashlib.sha256(b"\x01ab").digest()
    assert merkle.tree_root([]) == hashlib.sha256(b"").digest()


@pytest.mark.parametrize("n", range(1, 41))
def test_roots_and_proofs_match_the_rfc_definitions(n: int) -> None:
    data, leaves = DATA[:n], LEAVES[:n]
    root = merkle.tree_root(leaves)
    assert root == _mth(data)
    for m in range(n):
        path = merkle.inclusion_path(leaves, m)
        assert path == _path(m, data)
        assert merkle.verify_inclusion(leaves[m], m, n, path, root)
    for old in range(1, n):
        proof = merkle.consistency_path(leaves, old)
        assert proof == _subproof(old, data, True)
        assert merkle.verify_consistency(old, n, _mth(data[:old]), root, proof)


@pytest.mark.parametrize("n", [2, 5, 7, 8, 13, 32, 33])
def test_an_altered_inclusion_proof_or_leaf_fails(n: int) -> None:
    leaves = LEAVES[:n]
    root = merkle.tree_root(leaves)
    for m in range(n):
        path = merkle.inclusion_path(leaves, m)
        assert not merkle.verify_inclusion(merkle.leaf_hash(b"forged"), m, n, path, root)
        assert not merkle.verify_inclusion(leaves[m], m, n, path[:-1], root)  # shortened
        assert not merkle.verify_inclusion(leaves[m], m, n, [*path, root], root)  # lengthened
        for i in range(len(path)):
            bent = [*path[:i], merkle.leaf_hash(b"x"), *path[i + 1 :]]
            assert not merkle.verify_inclusion(leaves[m], m, n, bent, root)
        if m + 1 < n:
            assert not merkle.verify_inclusion(leaves[m], m + 1, n, path, root)


@pytest.mark.parametrize("n", [3, 6, 8, 11, 16, 21])
def test_consistency_fails_on_rewrite_fork_truncation_and_rollback(n: int) -> None:
    leaves = LEAVES[:n]
    root = merkle.tree_root(leaves)
    for old in range(1, n):
        proof = merkle.consistency_path(leaves, old)
        old_root = merkle.tree_root(leaves[:old])
        rewritten = [*leaves[: old - 1], merkle.leaf_hash(b"rewritten"), *leaves[old:]]
        # a log whose history before the old head was rewritten does not extend it
        assert not merkle.verify_consistency(
            old, n, old_root, merkle.tree_root(rewritten), merkle.consistency_path(rewritten, old)
        )
        # a fork: same size, other root
        assert not merkle.verify_consistency(old, old, old_root, merkle.tree_root(rewritten[:old]), [])
        # rolled back / truncated: the new tree is smaller than the old
        assert not merkle.verify_consistency(n, old, root, old_root, proof)
        for i in range(len(proof)):
            bent = [*proof[:i], merkle.leaf_hash(b"x"), *proof[i + 1 :]]
            assert not merkle.verify_consistency(old, n, old_root, root, bent)
    assert merkle.verify_consistency(n, n, root, root, [])
    assert merkle.verify_consistency(0, n, merkle.tree_root([]), root, [])
