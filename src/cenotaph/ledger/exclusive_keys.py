"""Scope and subject keys that only a forget's records use: shred them with the records, and
remove their rows at purge, so nothing in the store names what was erased.

A subject erasure that destroyed only the subject's records would leave the rows of the
subject's scopes behind (token, parent link, live wrapped key, one per session): whoever holds
the erasure secret could confirm guessed scope names and count sessions. So a compliance forget
of a subject or a scope also destroys:

- (subject forgets) every scope whose whole subtree holds no record with live keys other than
  the forgotten ones: a scope shared with anyone else, or one a reauthorized write used since,
  keeps its key and its row;
- (subject and scope forgets) every other subject (a caller-added one, say) carried only by the
  forgotten records.

These are found again from the records wherever the plan is applied -- the forget itself, a
replay on open or restore -- and never listed in the plan: a list of tokens in the ledger or in
the request's row would be exactly the name-confirmation oracle this module removes.

Cost grows with the forgotten records and the depth of their scopes, not with the store's history:
a scope's whole subtree is asked in one statement that stops after one more live record than the
forget destroys, and a shared scope's ancestors are not asked at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from ..backends import ops
from ..backends.base import Txn

__all__ = ["dead_key_rows", "split_tokens", "unshared_keys"]

TOKEN_BYTES = 32


def split_tokens(blob: bytes) -> list[bytes]:
    """The 32-byte tokens of a lineage row's ``subject_tokens``."""
    return [bytes(blob[i : i + TOKEN_BYTES]) for i in range(0, len(blob), TOKEN_BYTES)]


def unshared_keys(
    txn: Txn, kind: str, target: bytes, record_ids: Sequence[str]
) -> tuple[list[bytes], list[bytes]]:
    """(scope tokens, subject tokens) whose keys only ``record_ids`` use, for a compliance forget of
    ``kind`` (``scope``: its whole subtree; ``subject``: the unshared scopes of its records); the
    forget's own target subject is not included (the plan lists it)."""
    destroyed = set(record_ids)
    rows = txn.run(ops.LineageTokens(record_ids))
    if kind == "scope":
        scopes = txn.run(ops.SubtreeTokens(target))
    elif kind == "subject":
        scopes = _unshared_scopes(txn, destroyed, {scope for scope, _ in rows})
    else:
        scopes = []
    carried = {t for _, tokens in set(rows) for t in split_tokens(tokens)} - {target}
    subjects = [t for t in sorted(carried) if not _used_elsewhere(txn.run(ops.SubjectLineage(t)), destroyed)]
    return sorted(scopes), subjects


def _used_elsewhere(lineage: Iterator[tuple[str, int, bool]], destroyed: set[str]) -> bool:
    """Does any record with live keys outside ``destroyed`` appear (stops at the first)?"""
    return any(live and record_id not in destroyed for record_id, _, live in lineage)


def _unshared_scopes(txn: Txn, destroyed: set[str], leaves: set[bytes]) -> list[bytes]:
    """Scopes holding ``destroyed`` records, and their ancestors, whose whole subtree holds no
    other record with live keys; with each such scope, its whole subtree (empty descendants too:
    a row must never outlive its parent's, or a later subtree walk would lose it).

    Each scope is asked once, in one statement for its whole subtree that stops at one more
    live record than the forget destroys: if every one it finds is the forget's, it found them
    all (ids are distinct), so the subtree holds no other. A shared scope's ancestors are shared
    too, and are not asked."""
    parents, order = _with_ancestors(txn, leaves)
    shared: set[bytes] = set()
    unshared: set[bytes] = set()
    for token in order:
        if token in shared:
            continue
        live = txn.run(ops.LiveInSubtree(token, len(destroyed) + 1))
        # more than it destroys could only be a record id twice (a tampered table): shared
        if len(live) > len(destroyed) or any(record_id not in destroyed for record_id in live):
            up: bytes | None = token
            while up is not None and up not in shared:  # a tampered cycle ends
                shared.add(up)
                up = parents.get(up)
        else:
            unshared.update(txn.run(ops.SubtreeTokens(token)))
    return sorted(unshared)


def _with_ancestors(txn: Txn, tokens: Iterable[bytes]) -> tuple[dict[bytes, bytes], list[bytes]]:
    """The parent of each of ``tokens`` and their ancestors that has one, and all of them,
    deepest first."""
    seen: list[bytes] = []
    parents: dict[bytes, bytes] = {}
    level = set(tokens)
    while level:
        seen.extend(sorted(level - set(seen)))
        rows = txn.run(ops.ScopeRows(sorted(level)))
        parents.update({t: bytes(r.parent) for t, r in rows.items() if r.parent is not None})
        level = {bytes(r.parent) for r in rows.values() if r.parent is not None} - set(seen)
    return parents, seen


def dead_key_rows(
    txn: Txn,
    kind: str,
    target: bytes,
    record_ids: Sequence[str],
    listed: tuple[Sequence[bytes], Sequence[bytes]],
) -> tuple[list[bytes], list[bytes]]:
    """(scope tokens, subject tokens) of key rows a purge removes for a compliance forget: those
    ``listed`` in its plan and those found again from its records (call before their lineage
    rows are deleted). A row is removed only while its key is destroyed: a reauthorized write
    since then gave it a new key, and its row stays. A destroyed scope's descendants are all
    destroyed too (shredding follows whole subtrees), so they go with it."""
    rows = set(txn.run(ops.LineageTokens(record_ids)))
    scopes = set(listed[0]) | {scope for scope, _ in rows}
    if kind == "scope":
        scopes.add(target)
    subjects = set(listed[1]) | {t for _, tokens in rows for t in split_tokens(tokens)}
    if kind == "subject":
        subjects.add(target)
    dead_scopes: set[bytes] = set()
    for token in _with_ancestors(txn, scopes)[1]:
        row = txn.run(ops.ScopeRows([token])).get(token)
        if row is not None and row.wrapped is None and token not in dead_scopes:
            dead_scopes.update(t for t in txn.run(ops.SubtreeTokens(token)))
    found = txn.run(ops.ScopeRows(sorted(dead_scopes)))
    dead_subjects = [
        t for t, (wrapped, _) in txn.run(ops.SubjectRows(sorted(subjects))).items() if wrapped is None
    ]
    return sorted(t for t, r in found.items() if r.wrapped is None), sorted(dead_subjects)
