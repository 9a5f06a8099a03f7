"""The write path (W1, W3, S1, S2): validate items, check dominance, ensure keys, seal rows.

``RecordWriter`` holds no state of its own beyond what it is given: the store opens the write
transaction, calls :meth:`RecordWriter.write_batch` inside it, and updates its caches after commit.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .backends.base import ScopeKeyRow, Txn
from .crypto.keys import KeyChain
from .crypto.tokens import TokenMaker
from .dominance import Reauth, WriteTargets, decide
from .errors import DerivedFromForgottenError, InvalidValueError, StaleWriteError
from .records import RecordCrypto, SealedRecord, is_visible
from .scope import Scope, default_subjects
from .validation import (
    check_key,
    check_metadata,
    check_reauthorization,
    check_record_ids,
    check_subjects,
    check_ttl,
    echo,
    encode_json,
)

__all__ = ["RecordWriter", "WRITE_OPTIONS"]

WRITE_OPTIONS = (
    "scope",
    "key",
    "value",
    "subjects",
    "ttl",
    "derived_from",
    "metadata",
    "base_version",
    "reauthorization",
)

_OPTION_SET = frozenset(WRITE_OPTIONS)
TOMBSTONE_FILTER_LIMIT = 20_000  # targets kept in memory (a reload reads them all, ~20 ms); beyond, SQL


@dataclass(frozen=True, slots=True)
class Prepared:
    """One validated write, before its transaction."""

    scope: Scope
    key: str
    value_json: bytes
    subjects: tuple[str, ...]
    ttl: float | None
    derived_from: tuple[str, ...]
    metadata: dict[str, Any]
    base_version: int | None
    reauthorization: str | None


class TombstoneFilter:
    """Which tombstone targets exist, kept in memory per forget epoch (W1 without a query).

    Every forget inserts its tombstones and bumps ``forget_epoch`` in one transaction
    (``erasure.forget.apply_plan``, the only writer of tombstones), and tombstones are never
    deleted, so the set of targets committed at epoch ``e`` is exact in any transaction that reads
    ``e``. A write none of whose targets is in the set cannot be dominated: no tombstone query, no
    lift query. Any hit asks the database as before.

    A set read inside a transaction is used by that transaction only and published when it
    commits: a transaction that replayed a ledger entry and then rolled back must not leave its
    uncommitted tombstones (and epoch) behind. This process's own forgets extend the set in place;
    another process's forget costs one reload (inside the write lock), so past
    :data:`TOMBSTONE_FILTER_LIMIT` targets the filter switches itself off for good.
    """

    def __init__(self) -> None:
        self._state: tuple[int, frozenset[bytes]] | None = None  # (forget_epoch, targets)
        self._overflowed = False

    def versions(self, txn: Txn, targets: Sequence[bytes], forget_epoch: int) -> dict[bytes, int]:
        """Newest tombstone version per covered target (what ``txn.tombstone_versions`` returns)."""
        if self._overflowed:
            return txn.tombstone_versions(targets)
        state = self._state
        if state is None or state[0] != forget_epoch:
            known = txn.tombstone_targets(TOMBSTONE_FILTER_LIMIT)
            if known is None:
                txn.after_commit(self._overflow)
                return txn.tombstone_versions(targets)
            state = (forget_epoch, known)
            txn.after_commit(lambda: self._publish(state))
        if state[1].isdisjoint(targets):
            return {}
        return txn.tombstone_versions(targets)

    def forgot(self, epoch: int, targets: Iterable[bytes]) -> None:
        """After this process's forget committed at ``epoch``: extend the set if it was current."""
        state = self._state
        if state is not None and state[0] == epoch - 1:
            grown = state[1].union(targets)
            if len(grown) > TOMBSTONE_FILTER_LIMIT:
                self._overflow()
            else:
                self._state = (epoch, grown)

    def _publish(self, state: tuple[int, frozenset[bytes]]) -> None:
        self._state = state

    def _overflow(self) -> None:
        self._overflowed, self._state = True, None


class RecordWriter:
    def __init__(self, tokens: TokenMaker, keys: KeyChain, crypto: RecordCrypto) -> None:
        self._tokens = tokens
        self._keys = keys
        self._crypto = crypto
        self.tombstones = TombstoneFilter()

    def prepare(self, item: Mapping[str, Any]) -> Prepared:
        if not isinstance(item, Mapping):
            raise InvalidValueError("each item must be a dict with scope, key and value")
        if not _OPTION_SET.issuperset(item):
            unknown = sorted(echo(option) for option in item if option not in _OPTION_SET)
            raise InvalidValueError(
                f"unknown write option(s): {', '.join(unknown[:5])}; use only {', '.join(WRITE_OPTIONS)}"
            )
        if "value" not in item:
            raise InvalidValueError("a write needs a value (use store.forget() to remove a key)")
        base = item.get("base_version")
        if base is not None and (not isinstance(base, int) or isinstance(base, bool) or base < 0):
            raise InvalidValueError("base_version must be a non-negative int (a version returned by read)")
        token = item.get("reauthorization")
        if token is not None:
            check_reauthorization(token)
        return Prepared(
            scope=Scope.parse(item.get("scope")),
            key=check_key(item.get("key")),
            value_json=encode_json(item["value"]),
            subjects=tuple(check_subjects(item.get("subjects"))),
            ttl=check_ttl(item.get("ttl")),
            derived_from=check_record_ids(item.get("derived_from")),
            metadata=check_metadata(item.get("metadata")),
            base_version=base,
            reauthorization=token,
        )

    def write_batch(
        self, txn: Txn, prepared: Sequence[Prepared], version: int, forget_epoch: int
    ) -> tuple[list[SealedRecord], list[str]]:
        """Seal and insert ``prepared`` at versions ``version + 1 ...``; ``forget_epoch`` is the
        one read in this transaction."""
        future = max((p.base_version for p in prepared if p.base_version is not None), default=version)
        if future > version:  # read inside the write's transaction: the clock cannot move meanwhile
            raise InvalidValueError(
                f"base_version {future} is newer than anything this store has written (its clock is "
                f"at {version}); pass the version of a record you read from this store"
            )
        now = time.time()
        source_ids = sorted({s for p in prepared for s in p.derived_from})
        sources = self._open_sources(txn, source_ids)
        plans: list[tuple[Prepared, WriteTargets, list[str], list[tuple[str, bytes]]]] = []
        for p in prepared:
            inherited = [subject for s in p.derived_from for subject in sources[s][1]]
            subjects = list(dict.fromkeys([*default_subjects(p.scope), *p.subjects, *inherited]))
            targets = WriteTargets.build(
                self._tokens, p.scope, p.key, tuple(self._tokens.subject(x) for x in subjects)
            )
            plans.append((p, targets, subjects, [(s, sources[s][0]) for s in p.derived_from]))
        all_targets = list({t for _, w, _, _ in plans for t in w.tombstone_targets()})
        tombstones = self.tombstones.versions(txn, all_targets, forget_epoch)
        lifts = (
            txn.lift_versions(list({t for _, w, _, _ in plans for t in w.lift_targets()}))
            if tombstones
            else {}
        )
        existing = {
            (r.scope_token, r.key_token): r
            for r in txn.records_in_slots(list({(w.scope_token, w.key_token) for _, w, _, _ in plans}))
        }
        for i, (p, targets, _, _) in enumerate(plans, start=version + 1):
            reauth = self._reauth(txn, p.reauthorization)
            lifted = decide(targets, tombstones, lifts, p.base_version, reauth)
            if lifted and reauth is not None and p.reauthorization is not None:
                txn.consume_reauth(self._tokens.reauth(p.reauthorization), i)
                # the lift reaches back to the token's issue, not to its use: a tombstone newer
                # than the token anywhere in a scope token's subtree stays in force (W1)
                for lift in lifted:
                    txn.insert_lift(lift, reauth.issued_version)
                    lifts[lift] = max(lifts.get(lift, 0), reauth.issued_version)
        self._ensure_scope_keys(txn, [p.scope for p in prepared])
        subject_keys = self._ensure_subject_keys(txn, {t for _, w, _, _ in plans for t in w.subject_tokens})
        sealed: dict[tuple[bytes, bytes], SealedRecord] = {}
        replaced: list[str] = []
        for p, targets, subjects, source_keys in plans:
            version += 1
            slot = (targets.scope_token, targets.key_token)
            old = existing.get(slot)
            if (
                p.base_version is not None
                and old is not None
                and is_visible(old, now)  # an expired or forgotten record is no longer "current"
                and old.version > p.base_version
            ):
                raise StaleWriteError(
                    f"the record changed (version {old.version}) after base_version {p.base_version}; "
                    "re-read it and retry"
                )
            if old is not None:
                replaced.append(old.id)
                existing.pop(slot)
            sealed[slot] = self._crypto.seal(
                scope_path=p.scope.path,
                key=p.key,
                value_json=p.value_json,
                version=version,
                scope_keys=self._scope_keys_for(p.scope),
                subjects=subjects,
                subject_tokens=targets.subject_tokens,
                subject_keys=[subject_keys[t] for t in targets.subject_tokens],
                sources=source_keys,
                metadata=p.metadata,
                created_at=now,
                expires_at=None if p.ttl is None else now + p.ttl,
                scope_token=targets.scope_token,
                key_token=targets.key_token,
            )
        txn.delete_records(replaced)
        txn.insert_records([s.row for s in sealed.values()], [s.lineage for s in sealed.values()])
        txn.set_clock(version)
        for s in sealed.values():
            self._keys.remember_lineage(s.opened.id, s.lineage_key)
        return [sealed[(w.scope_token, w.key_token)] for _, w, _, _ in plans], replaced

    def _open_sources(self, txn: Txn, ids: Sequence[str]) -> dict[str, tuple[bytes, list[str]]]:
        """Lineage key and subjects of each derived_from source; raises if one was forgotten."""
        if not ids:
            return {}
        rows = txn.lineage(ids)
        records = {i: txn.record(i) for i in ids}
        found: dict[str, tuple[bytes, list[str]]] = {}
        for source in ids:
            row = rows.get(source)
            if row is None:
                erased = txn.erased_version(source)
                if erased is not None:
                    raise DerivedFromForgottenError(
                        f"a derived_from source was erased at version {erased}; do not write data derived "
                        "from forgotten records",
                        erased,
                    )
                raise InvalidValueError(
                    "derived_from names a record id this store never wrote; pass ids returned by store.write()"
                )
            rec = records[source]
            forgotten = (
                row.destroyed_version or row.forgotten_version or (rec is not None and rec.hidden_version)
            )
            key = None if forgotten else self._crypto.lineage_key_of(txn, row)
            subjects = None if key is None else self._crypto.subjects_of(txn, row)
            if key is None or subjects is None:
                version = int(
                    row.destroyed_version or row.forgotten_version or (rec.hidden_version if rec else 0) or 0
                )
                raise DerivedFromForgottenError(
                    f"a derived_from source was forgotten at version {version}; do not write data derived "
                    "from forgotten records",
                    version,
                )
            found[source] = (key, subjects)
        return found

    def _reauth(self, txn: Txn, token: str | None) -> Reauth | None:
        if token is None:
            return None
        row = txn.reauth(self._tokens.reauth(token))
        return None if row is None else Reauth(*row)

    def _ensure_scope_keys(self, txn: Txn, scopes: Iterable[Scope]) -> None:
        wanted = {self._tokens.scope(p): p for s in scopes for p in s.prefixes()}
        missing = [t for t in wanted if t not in self._keys.scope_keys]
        if not missing:
            return
        rows = txn.scope_rows(missing)
        new_rows: list[ScopeKeyRow] = []
        for token in missing:
            row = rows.get(token)
            if row is not None:
                key = self._keys.unwrap(row.wrapped, row.epoch)
                if key is None:
                    # destroyed by a compliance forget: dominance already allowed this write, so the
                    # scope starts a new key generation (old data stays undecryptable)
                    key, wrapped, epoch = self._keys.new_wrapped()
                    txn.replace_scope_key(token, wrapped, epoch)
                self._keys.scope_keys[token] = key
                continue
            key, wrapped, epoch = self._keys.new_wrapped()
            parent = wanted[token].parent()
            new_rows.append(
                ScopeKeyRow(token, None if parent is None else self._tokens.scope(parent), wrapped, epoch)
            )
            self._keys.scope_keys[token] = key
        txn.insert_scopes(new_rows)

    def _scope_keys_for(self, scope: Scope) -> list[bytes]:
        keys = self._keys.scope_keys
        return [keys[t] for t in self._tokens.scope_chain(scope)]

    def _ensure_subject_keys(self, txn: Txn, tokens: set[bytes]) -> dict[bytes, bytes]:
        missing = [t for t in tokens if t not in self._keys.subject_keys]
        if missing:
            rows = txn.subject_rows(missing)
            new_rows: list[tuple[bytes, bytes, int]] = []
            for token in missing:
                wrapped, epoch = rows.get(token, (None, None))
                key = self._keys.unwrap(wrapped, epoch)
                if key is None:
                    key, wrapped_new, epoch_new = self._keys.new_wrapped()
                    if token in rows:
                        txn.replace_subject_key(token, wrapped_new, epoch_new)
                    else:
                        new_rows.append((token, wrapped_new, epoch_new))
                self._keys.subject_keys[token] = key
            txn.insert_subjects(new_rows)
        return {t: self._keys.subject_keys[t] for t in tokens}
