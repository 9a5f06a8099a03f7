"""The write path (W1, W3, S1, S2): validate items, check dominance, ensure keys, seal rows.

``RecordWriter`` holds no state of its own beyond what it is given: the store opens the write
transaction, calls :meth:`RecordWriter.write_batch` inside it, and updates its caches after commit.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends import ops
from ..backends.base import ScopeKeyRow, Txn
from ..clock import Clock
from ..crypto.keys import KeyChain, group_part
from ..crypto.tokens import TokenMaker
from ..dominance import Reauth, WriteTargets, decide
from ..errors import DerivedFromForgottenError, InvalidValueError, StaleWriteError
from ..ledger.view import LedgerView
from ..records import RANDOM_BYTES, RecordCrypto, SealedRecord, is_visible
from ..scope import Scope, default_subjects
from ..validation import (
    check_key,
    check_metadata,
    check_reauthorization,
    check_record_ids,
    check_subjects,
    check_ttl,
    echo,
    encode_json,
    flat_copy,
)

__all__ = ["RecordWriter", "TokenUse", "WRITE_OPTIONS"]

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


@dataclass(frozen=True, slots=True)
class TokenUse:
    """A reauthorization token consumed by a write: recorded in the ledger before COMMIT."""

    digest: bytes
    version: int
    lifts: tuple[tuple[bytes, int], ...]


@dataclass(frozen=True, slots=True)
class Prepared:
    """One validated write, before its transaction."""

    scope: Scope
    key: str
    value_json: bytes
    value_copy: tuple[Any] | None  # a flat value's private copy, the JSON's source (validation.flat_copy)
    subjects: tuple[str, ...]
    ttl: float | None
    derived_from: tuple[str, ...]
    metadata: dict[str, Any]
    base_version: int | None
    reauthorization: str | None


class RecordWriter:
    def __init__(self, tokens: TokenMaker, keys: KeyChain, crypto: RecordCrypto, clock: Clock) -> None:
        self._clock = clock
        self._tokens = tokens
        self._keys = keys
        self._crypto = crypto

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
        value = item["value"]
        copy = flat_copy(value)
        return Prepared(
            scope=Scope.parse(item.get("scope")),
            key=check_key(item.get("key")),
            value_json=encode_json(value if copy is None else copy[0]),
            value_copy=copy,
            subjects=tuple(check_subjects(item.get("subjects"))),
            ttl=check_ttl(item.get("ttl")),
            derived_from=check_record_ids(item.get("derived_from")),
            metadata=check_metadata(item.get("metadata")),
            base_version=base,
            reauthorization=token,
        )

    def write_batch(
        self, txn: Txn, prepared: Sequence[Prepared], version: int, view: LedgerView
    ) -> tuple[list[SealedRecord], list[str], list[TokenUse]]:
        """Seal and insert ``prepared`` at versions ``version + 1 ...``. Tombstones, lifts and
        tokens are the ledger's (``view``, read inside this transaction), never the database's
        rows (S9). Returns the rows, the ids replaced, and the tokens used (for the ledger)."""
        future = max((p.base_version for p in prepared if p.base_version is not None), default=version)
        if future > version:  # read inside the write's transaction: the clock cannot move meanwhile
            raise InvalidValueError(
                f"base_version {future} is newer than anything this store has written (its clock is "
                f"at {version}); pass the version of a record you read from this store"
            )
        now = self._clock.now()
        source_ids = sorted({s for p in prepared for s in p.derived_from})
        sources = self._open_sources(txn, source_ids, view)
        plans: list[tuple[Prepared, WriteTargets, list[str], list[tuple[str, bytes]]]] = []
        # no tombstone anywhere (the ledger's word): nothing can dominate these writes, and the
        # key targets (an HMAC per scope prefix) are not needed
        build = WriteTargets.build if view.tombstones else WriteTargets.names_only
        for p in prepared:
            inherited = [subject for s in p.derived_from for subject in sources[s][1]]
            subjects = list(dict.fromkeys([*default_subjects(p.scope), *p.subjects, *inherited]))
            targets = build(self._tokens, p.scope, p.key, tuple(self._tokens.subject(x) for x in subjects))
            plans.append((p, targets, subjects, [(s, sources[s][0]) for s in p.derived_from]))
        all_targets = list({t for _, w, _, _ in plans for t in w.tombstone_targets()})
        tombstones = view.tombstone_versions(all_targets)
        lifts = (
            view.lift_versions(list({t for _, w, _, _ in plans for t in w.lift_targets()}))
            if tombstones
            else {}
        )
        uses: list[TokenUse] = []
        existing = {
            (r.scope_token, r.key_token): r
            for r in txn.run(ops.RecordsInSlots(list({(w.scope_token, w.key_token) for _, w, _, _ in plans})))
        }
        for i, (p, targets, _, _) in enumerate(plans, start=version + 1):
            digest = None if p.reauthorization is None else self._tokens.reauth(p.reauthorization)
            reauth = self._reauth(txn, digest, view)
            lifted = decide(targets, tombstones, lifts, p.base_version, reauth)
            if lifted and reauth is not None and digest is not None:
                txn.run(ops.ConsumeReauth(digest, i))
                # the lift reaches back to the token's issue, not to its use: a tombstone newer
                # than the token anywhere in a scope token's subtree stays in force (W1)
                for lift in lifted:
                    txn.run(ops.InsertLift(lift, reauth.issued_version))
                    lifts[lift] = max(lifts.get(lift, 0), reauth.issued_version)
                uses.append(TokenUse(digest, i, tuple((t, reauth.issued_version) for t in lifted)))
        self._ensure_scope_keys(txn, [p.scope for p in prepared])
        subject_keys = self._ensure_subject_keys(txn, {t for _, w, _, _ in plans for t in w.subject_tokens})
        sealed: dict[tuple[bytes, bytes], SealedRecord] = {}
        replaced: list[str] = []
        randomness = os.urandom(RANDOM_BYTES * len(plans))  # one call for the whole batch
        # a group (scope and subject set) frames its keys once per batch, from the keys just ensured
        groups: dict[tuple[bytes, tuple[bytes, ...]], bytes] = {}
        for n, (p, targets, subjects, source_keys) in enumerate(plans):
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
                value_copy=p.value_copy,
                version=version,
                group=self._group(groups, p.scope, targets, subject_keys),
                subjects=subjects,
                subject_tokens=targets.subject_tokens,
                sources=source_keys,
                metadata=p.metadata,
                created_at=now,
                expires_at=None if p.ttl is None else now + p.ttl,
                scope_token=targets.scope_token,
                key_token=targets.key_token,
                material=randomness[n * RANDOM_BYTES : (n + 1) * RANDOM_BYTES],
            )
        rows = list(sealed.values())
        txn.run(ops.InsertRecords([s.row for s in rows], [s.lineage for s in rows], replaced))
        txn.run(ops.Advance("clock", version))
        for s in sealed.values():
            self._keys.remember_lineage(s.opened.id, s.lineage_key)
        return [sealed[(w.scope_token, w.key_token)] for _, w, _, _ in plans], replaced, uses

    def _open_sources(
        self, txn: Txn, ids: Sequence[str], view: LedgerView
    ) -> dict[str, tuple[bytes, list[str]]]:
        """Lineage key and subjects of each derived_from source; raises if one was forgotten."""
        if not ids:
            return {}
        for source in ids:
            if source in view.forgotten:  # the ledger's word: the source's rows may have been edited
                raise DerivedFromForgottenError(
                    f"a derived_from source was forgotten at version {view.forgotten[source]}; do not "
                    "write data derived from forgotten records",
                    view.forgotten[source],
                )
        rows = txn.run(ops.Lineage(ids))
        records = {i: txn.run(ops.Record(i)) for i in ids}
        found: dict[str, tuple[bytes, list[str]]] = {}
        for source in ids:
            row = rows.get(source)
            if row is None:
                erased = txn.run(ops.ErasedVersion(source))
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

    @staticmethod
    def _reauth(txn: Txn, digest: bytes | None, view: LedgerView) -> Reauth | None:
        """The token as the ledger issued it; used if the ledger or the database says so (a row
        can only make a token stricter: one the ledger never issued is no token)."""
        grant = None if digest is None else view.grants.get(digest)
        if grant is None or digest is None:
            return None
        row = txn.run(ops.Reauth(digest))
        used = view.consumed.get(digest, None if row is None else row[3])
        return Reauth(grant.kind, grant.target, grant.issued_version, used, grant.subject)

    def _ensure_scope_keys(self, txn: Txn, scopes: Iterable[Scope]) -> None:
        wanted = {self._tokens.scope(p): p for s in dict.fromkeys(scopes) for p in s.prefixes()}
        missing = [t for t in wanted if t not in self._keys.scope_keys]
        if not missing:
            return
        rows = txn.run(ops.ScopeRows(missing))
        new_rows: list[ScopeKeyRow] = []
        for token in missing:
            row = rows.get(token)
            if row is not None:
                key = self._keys.unwrap(row.wrapped, row.epoch)
                if key is None:
                    # destroyed by a compliance forget: dominance already allowed this write, so the
                    # scope starts a new key generation (old data stays undecryptable)
                    key, wrapped, epoch = self._keys.new_wrapped()
                    txn.run(ops.ReplaceScopeKey(token, wrapped, epoch))
                self._keys.scope_keys[token] = key
                continue
            key, wrapped, epoch = self._keys.new_wrapped()
            parent = wanted[token].parent()
            new_rows.append(
                ScopeKeyRow(token, None if parent is None else self._tokens.scope(parent), wrapped, epoch)
            )
            self._keys.scope_keys[token] = key
        txn.run(ops.InsertScopes(new_rows))

    def _group(
        self,
        groups: dict[tuple[bytes, tuple[bytes, ...]], bytes],
        scope: Scope,
        targets: WriteTargets,
        subject_keys: Mapping[bytes, bytes],
    ) -> bytes:
        slot = (targets.scope_token, targets.subject_tokens)
        part = groups.get(slot)
        if part is None:
            part = groups[slot] = group_part(
                self._scope_keys_for(scope), [subject_keys[t] for t in targets.subject_tokens]
            )
        return part

    def _scope_keys_for(self, scope: Scope) -> list[bytes]:
        keys = self._keys.scope_keys
        return [keys[t] for t in self._tokens.scope_chain(scope)]

    def _ensure_subject_keys(self, txn: Txn, tokens: set[bytes]) -> dict[bytes, bytes]:
        missing = [t for t in tokens if t not in self._keys.subject_keys]
        if missing:
            rows = txn.run(ops.SubjectRows(missing))
            new_rows: list[tuple[bytes, bytes, int]] = []
            for token in missing:
                wrapped, epoch = rows.get(token, (None, None))
                key = self._keys.unwrap(wrapped, epoch)
                if key is None:
                    key, wrapped_new, epoch_new = self._keys.new_wrapped()
                    if token in rows:
                        txn.run(ops.ReplaceSubjectKey(token, wrapped_new, epoch_new))
                    else:
                        new_rows.append((token, wrapped_new, epoch_new))
                self._keys.subject_keys[token] = key
            txn.run(ops.InsertSubjects(new_rows))
        return {t: self._keys.subject_keys[t] for t in tokens}
