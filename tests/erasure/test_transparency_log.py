"""The audit entries as an RFC 9162 transparency log, on every backend: signed heads, consistency
proofs, and a certificate's inclusion proof. The roots are recomputed here from the stored rows with
hashlib alone; tampering, truncation, forks and rollbacks are each caught."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from tests.kit.stores import StoreFactory

import cenotaph
from cenotaph import CertificateError, Store
from cenotaph.audit.chain import GENESIS, chain_entry, entry_from_dict, entry_to_dict

SCOPE = "tenant:acme/user:alice"


def _rows(store_factory: StoreFactory, store: Store) -> list[str]:
    with store_factory.raw(store) as conn:
        return [row[0] for row in conn.execute("SELECT entry FROM audit ORDER BY seq").fetchall()]


def _root(rows: list[str]) -> bytes:
    """RFC 9162 MTH over the entries' canonical JSON, independently of cenotaph.audit.merkle."""

    def mth(leaves: list[bytes]) -> bytes:
        if not leaves:
            return hashlib.sha256(b"").digest()
        if len(leaves) == 1:
            return leaves[0]
        k = 1
        while k * 2 < len(leaves):
            k *= 2
        return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()

    data = [
        json.dumps(json.loads(r), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        for r in rows
    ]
    return mth([hashlib.sha256(b"\x00" + d).digest() for d in data])


def _forget_twice(store: Store) -> None:
    store.write(SCOPE, "k1", "one")
    store.write(SCOPE, "k2", "two")
    store.forget(SCOPE, "k1")
    store.forget(SCOPE, "k2")


def test_a_tree_head_is_signed_and_commits_to_the_stored_entries(store_factory: StoreFactory) -> None:
    store = store_factory()
    empty = store.tree_head()
    assert empty["tree_size"] == 0 and empty["root_hash"] == hashlib.sha256(b"").hexdigest()
    _forget_twice(store)
    head = store.tree_head()
    rows = _rows(store_factory, store)
    assert head["tree_size"] == len(rows) >= 2
    assert head["root_hash"] == _root(rows).hex()
    assert set(head) == {"tree_size", "root_hash", "timestamp", "signature"}
    forged = {**head, "tree_size": head["tree_size"] - 1}
    with pytest.raises(CertificateError, match="signature does not match"):
        cenotaph.verify_consistency(forged, head, [], store.public_key)


def test_a_later_head_proves_it_extends_an_earlier_one(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.write(SCOPE, "k0", 0)
    store.forget(SCOPE, "k0")
    old = store.tree_head()
    _forget_twice(store)
    answer = store.consistency_proof(old["tree_size"])
    new = answer["tree_head"]
    assert new["tree_size"] > old["tree_size"]
    assert new["root_hash"] == _root(_rows(store_factory, store)).hex()
    assert cenotaph.verify_consistency(old, new, answer["proof"], store.public_key) == (
        old["tree_size"],
        new["tree_size"],
    )
    with pytest.raises(CertificateError, match=f"of {new['tree_size']} entries does not extend the one of"):
        cenotaph.verify_consistency(old, new, answer["proof"][:-1], store.public_key)
    with pytest.raises(cenotaph.InvalidValueError, match="truncated or rolled back"):
        store.consistency_proof(new["tree_size"] + 5)


def _rewrite_from(store_factory: StoreFactory, store: Store, seq: int, event: str = "rotate") -> None:
    """Rewrite entry ``seq`` and re-hash every later link (what an operator with write access can do)."""
    rows = _rows(store_factory, store)
    entries = [entry_from_dict(json.loads(r)) for r in rows]
    head = entries[seq - 2].head if seq > 1 else GENESIS
    with store_factory.raw(store) as conn:
        for entry in entries[seq - 1 :]:
            name = event if entry.seq == seq else entry.event
            new = chain_entry(head, entry.seq, entry.at, name, entry.fields)
            conn.execute(
                "UPDATE audit SET entry = ? WHERE seq = ?", (json.dumps(entry_to_dict(new)), entry.seq)
            )
            head = new.head


@pytest.mark.parametrize("attack", ["rewrite", "truncate"])
def test_a_rewritten_or_truncated_log_no_longer_extends_a_kept_head(
    store_factory: StoreFactory, attack: str
) -> None:
    store = store_factory()
    _forget_twice(store)
    kept = store.tree_head()
    size = kept["tree_size"]
    if attack == "rewrite":
        _rewrite_from(store_factory, store, 1)
    else:
        with store_factory.raw(store) as conn:
            conn.execute("DELETE FROM audit WHERE seq = ?", (size,))
    store = store_factory.reopen(store)
    if attack == "truncate":
        with pytest.raises(
            cenotaph.InvalidValueError, match=f"holds {size - 1} entries, fewer than the {size}"
        ):
            store.consistency_proof(size)
        return
    answer = store.consistency_proof(size)
    with pytest.raises(CertificateError, match=f"of {size} entries does not extend the one of {size}"):
        cenotaph.verify_consistency(kept, answer["tree_head"], answer["proof"], store.public_key)


def _certificate(store_factory: StoreFactory) -> tuple[Store, dict[str, Any]]:
    store = store_factory(purge=True)
    store.write(SCOPE, "k", "v")
    request = store.forget(SCOPE, "k")
    request.wait()
    return store, dict(store.attest(request.id).fields)


def test_a_certificate_proves_its_forget_entry_is_in_the_signed_tree(store_factory: StoreFactory) -> None:
    store, certificate = _certificate(store_factory)
    log = certificate["log"]
    rows = _rows(store_factory, store)
    forget = next(
        i
        for i, r in enumerate(rows)
        if json.loads(r)["event"] == "forget"
        and json.loads(r)["fields"]["request_id"] == certificate["request_id"]
    )
    assert log["leaf_index"] == forget
    data = json.dumps(json.loads(rows[forget]), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert log["leaf_hash"] == hashlib.sha256(b"\x00" + data.encode()).hexdigest()
    assert log["tree_head"]["root_hash"] == _root(rows[: log["tree_head"]["tree_size"]]).hex()
    assert cenotaph.verify_certificate(json.dumps(certificate), store.public_key)["log"] == log


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ("leaf_hash", "inclusion_path does not lead"),
        ("inclusion_path", "inclusion_path does not lead"),
        ("root_hash", "tree_head's signature does not match"),
        ("tree_size", "tree_head's signature does not match"),
    ],
)
def test_a_certificate_with_an_altered_path_or_head_fails_saying_which(
    store_factory: StoreFactory, part: str, message: str
) -> None:
    store, certificate = _certificate(store_factory)
    log = json.loads(json.dumps(certificate["log"]))
    if part == "leaf_hash":
        log["leaf_hash"] = hashlib.sha256(b"\x00forged").hexdigest()
    elif part == "inclusion_path":
        assert log["inclusion_path"], "the tree has more than one entry"
        log["inclusion_path"][0] = hashlib.sha256(b"forged").hexdigest()
    elif part == "root_hash":
        log["tree_head"]["root_hash"] = hashlib.sha256(b"forged").hexdigest()
    else:
        log["tree_head"]["tree_size"] += 1
    with pytest.raises(CertificateError, match=message):
        cenotaph.verify_certificate(json.dumps({**certificate, "log": log}), store.public_key)
