"""The Store: the public API and all of its policy. No SQL here (see ``backends``)."""

from __future__ import annotations

import atexit
import builtins
import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .audit.log import TransparencyLog
from .backends import (
    POSTGRES_DEFAULT_SCHEMA,
    Found,
    Location,
    discard_created,
    holds_database_snapshot,
    is_postgres_url,
    load_snapshot,
    locate,
    open_backend,
    ops,
)
from .backends.base import Backend, LineageRow, LostRace, NeedsSnapshot, RecordRow, Txn, WriteLocks
from .caches import RECORD_CACHE_LIMIT, StoreCaches
from .clock import SYSTEM_CLOCK, Clock
from .consumers import DEFAULT_ACK_DAYS, Consumer
from .consumers.registry import Registry
from .crypto.aead import derive
from .crypto.keys import KeyChain
from .crypto.provider import KeyProvider, keyring_env_location, keyring_from_env, keyring_from_env_only
from .crypto.tokens import TokenMaker
from .dominance import WriteTargets, blocking
from .erasure.entrance import CLOSE_PASS_S, Erasure, Progress, purge_mode
from .erasure.lifecycle.restoring import check_not_restoring, check_outside_stores, restoring
from .erasure.planning.sampling import ProbeSampler
from .errors import (
    ForgottenError,
    InvalidValueError,
    StaleWriteError,
    StorageError,
)
from .index.embedder import Embedder, HashingEmbedder
from .index.search import SearchIndex, check_filter, check_query, matches_filter
from .ledger.journal import KEK_EPOCH, Ledger
from .locking import LockedBackend
from .model import (
    BackupInfo,
    Certificate,
    ErasureRequest,
    ErasureStatus,
    JSONValue,
    Mode,
    PurgeReport,
    Record,
    Retention,
    RotationReport,
    SearchHit,
)
from .records import OpenedRecord, RecordCrypto, SealedRecord, is_visible
from .scope import Scope, default_subjects
from .session import StoreSession
from .validation import (
    check_callback,
    check_flag,
    check_key,
    check_owner,
    check_path,
    check_subject,
    check_subjects,
)
from .writes.batches import GroupWriter
from .writes.group_commit import GroupCommit
from .writes.locks import write_ahead, write_locks
from .writes.record_writer import Prepared, RecordWriter

__all__ = ["Store", "StoreSession", "open_store", "restore"]


def _unexpired(opened: OpenedRecord, now: float) -> bool:
    return opened.expires_at is None or opened.expires_at > now


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


class Store:
    """A cenotaph store. Thread-safe; several processes may open the same data directory.

    >>> import cenotaph, tempfile
    >>> with cenotaph.open(tempfile.mkdtemp()) as store:
    ...     _ = store.write("tenant:acme/user:alice", "diet", "vegetarian")
    ...     store.read("tenant:acme/user:alice/session:s1", "diet").value
    'vegetarian'
    """

    def __init__(
        self,
        backend: Backend,
        provider: KeyProvider,
        *,
        auto_purge: str = "background",
        embedder: Embedder | None = None,
        restored: bool = False,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._backend = LockedBackend(backend)  # the store serialises its own threads
        self._provider = provider
        self._tokens = TokenMaker(provider.erasure_secret())
        self._keys = KeyChain(provider)
        self._crypto = RecordCrypto(self._keys)
        self._clock = clock  # the wall clock of every TTL: written, read, swept
        self._writer = RecordWriter(self._tokens, self._keys, self._crypto, clock)
        self._batches = GroupWriter(self._writer, self._keys)
        self._group: GroupCommit[Sequence[Prepared], list[SealedRecord]] = GroupCommit(self._commit_writes)
        self._kek_seen: int | None = -1
        self._search = SearchIndex(embedder if embedder is not None else HashingEmbedder())
        self._sampler = ProbeSampler(provider, self._keys, self._crypto, self._search)
        self._ledger = Ledger(provider, self._sampler.seal, [p.layer for p in backend.physical.layers])
        # the caches and how fresh they are: shared with the erasure side, which syncs and
        # drops what memory holds through it (it never calls back into the store)
        self._caches = StoreCaches(self._backend, provider, self._keys, self._search, self._ledger)
        self._log = TransparencyLog(self._backend, lambda: self._erasure.signer().sign)
        self._erasure = Erasure(
            self._backend,
            provider,
            self._keys,
            self._tokens,
            self._crypto,
            self._sampler,
            self._caches,
            self._ledger,
            auto_purge,
            clock,
        )
        self._consumers = Registry(self._backend, provider, clock.now)
        atexit.register(self._ledger.flush_anchors)  # a process that exits without close() too
        try:
            self._erasure.open(restored=restored)
        except BaseException:
            self._erasure.close()
            atexit.unregister(self._ledger.flush_anchors)
            self._backend.close()  # a refused open leaves no connection behind
            raise

    # -- lifecycle -----------------------------------------------------------------------
    def close(self, *, purge_timeout: float = CLOSE_PASS_S) -> None:
        """Close the store. Background erasure work still due (a forget just made, a pass running
        or about to retry) gets one more pass first, for at most ``purge_timeout`` seconds; then
        the worker stops at its next step boundary, and whatever it left (a purge, a large
        forget's chunks) resumes when this store is next opened. A background pass that failed,
        and that no caller has been told of, is raised once the store is closed."""
        if self._caches.closed:
            return
        try:
            self._erasure.finish(purge_timeout)
        finally:
            self._erasure.close()
            atexit.unregister(self._ledger.flush_anchors)
            self._ledger.flush_anchors()
            self._search.flush(self._store_vectors, force=True)
            self._caches.closed = True
            self._caches.drop()
            self._backend.close()
        self.raise_background_failure()

    def raise_background_failure(self) -> None:
        """Raise, once, the failure of background erasure passes that no caller has been told
        of (a ``wait()`` that saw it was told): a :class:`StorageError` (or the key provider's
        :class:`KeyProviderError`) saying what to do. Surfaces that run the worker for their
        users (the LangGraph adapter, at every call) call it so a failing purge is never silent."""
        self._erasure.raise_background_failure()

    @property
    def purge_mode(self) -> str:
        """``"background"``, ``"sync"`` or ``"off"``: what a compliance forget does about its purge
        (see :func:`open_store`'s ``auto_purge``)."""
        return self._erasure.mode

    @property
    def auto_purge(self) -> bool:
        """Whether compliance forgets are purged without a call to :meth:`purge` (in the
        background or before they return). Setting it takes a mode by name, as ``open``'s
        ``auto_purge`` does; :attr:`purge_mode` reads which."""
        return self._erasure.mode != "off"

    @auto_purge.setter
    def auto_purge(self, value: str) -> None:
        self._erasure.mode = value

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def path(self) -> Path | None:
        return self._backend.location

    def write(
        self,
        scope: str,
        key: str,
        value: JSONValue,
        *,
        subjects: Iterable[str] | None = None,
        ttl: float | timedelta | None = None,
        derived_from: Iterable[str] = (),
        metadata: Mapping[str, JSONValue] | None = None,
        base_version: int | None = None,
        reauthorization: str | None = None,
    ) -> Record:
        """Write ``value`` under ``(scope, key)``; durable when it returns (W7)."""
        item = {
            "scope": scope,
            "key": key,
            "value": value,
            "subjects": subjects,
            "ttl": ttl,
            "derived_from": derived_from,
            "metadata": metadata,
            "base_version": base_version,
            "reauthorization": reauthorization,
        }
        return self.write_many([item])[0]

    def write_many(self, items: Iterable[Mapping[str, Any]]) -> list[Record]:
        """Write several records in one transaction: all land or none does."""
        self._caches.check_open()
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise InvalidValueError("write_many takes a list of dicts, each with scope, key and value")
        prepared = [self._writer.prepare(item) for item in items]
        if not prepared:
            return []
        if len({(p.scope, p.key) for p in prepared}) != len(prepared):
            raise InvalidValueError(
                "write_many names the same (scope, key) twice; write each key once per batch "
                "(the last value would silently replace the first)"
            )
        # one transaction and one fsync for every write queued meanwhile (see cenotaph/writes/group_commit.py);
        # a thread already inside this backend (a callback) commits alone, as it always did
        alone = any(p.reauthorization is not None for p in prepared)
        if self._backend.held_here():
            outcome = self._commit_writes([prepared])[0]
            if isinstance(outcome, BaseException):
                raise outcome
            sealed = outcome
        else:
            sealed = self._group.submit(prepared, len(prepared), alone=alone)
        return [s.opened.record() for s in sealed]

    def _commit_writes(self, group: Sequence[Sequence[Prepared]]) -> list[list[SealedRecord] | BaseException]:
        """Commit a group of write_many calls in one transaction, each checked and refused on its
        own (a refusal rolls back that call's rows only); raises if the transaction fails."""
        locks: WriteLocks | None = None
        ahead: list[ops.Op[Any]] = []
        hint: bytes | None = None
        if self._backend.concurrent_writers:  # PostgreSQL: only the targets (writes/locks.py)
            # the ledger quiet since the last complete sync: the change marker is read first in
            # the write's own first round trip, and the caches synced from it there (below)
            hint = self._caches.quiet_hint()
            if hint is None:
                self._caches.sync()
            # a ledger this process has not replayed yet: store-wide, where replaying is safe
            locks = None if self._ledger.changed() else write_locks(self._tokens, group)
            if locks is None and hint is not None:
                self._caches.sync()  # a store-wide write may replay the ledger: synced before, as ever
                hint = None
            ahead = [ops.Marker()] if hint is not None else []
            ahead += write_ahead(self._tokens, group)
        else:
            self._caches.sync()
        self._caches.check_open()
        try:
            return self._commit_group(group, locks, ahead, hint)
        except LostRace:  # another write made a key this one made too: store-wide, it finds it
            self._caches.sync()
            ahead = [op for op in ahead if not isinstance(op, ops.Marker)]
            return self._commit_group(group, None, ahead, None)

    def _commit_group(
        self,
        group: Sequence[Sequence[Prepared]],
        locks: WriteLocks | None,
        ahead: Sequence[ops.Op[Any]],
        hint: bytes | None = None,
    ) -> list[list[SealedRecord] | BaseException]:
        try:
            with self._backend.write(locks, ahead) as txn:
                # read first, before the counters: another connection's commit since the last
                # complete sync is acted on before any cached key is used (caches.sync_in_write)
                marker = None if hint is None else txn.run(ops.Marker())
                mark: int | None = self._provider.ledger_mark()  # one stat, under the write lock
                if self._ledger.changed(mark):
                    # only store-wide: under target locks a forget of other targets may be between
                    # its ledger append and its COMMIT; the view below decides all the same (S9)
                    if locks is None:
                        self._ledger.reconcile(txn)
                    mark = None  # a replay may have appended: the view reads the ledger again
                view = self._ledger.view
                if view.refresh(mark):
                    self._keys.clear()  # a forget elsewhere may have destroyed cached keys
                meta = txn.run(ops.MetaAll())
                if hint is not None and not self._caches.quiet_marker(marker):
                    self._caches.sync_in_write(marker, hint, meta["forget_epoch"])
                if meta["forget_epoch"] != self._caches.forget_epoch:
                    self._keys.clear()  # a forget since our last sync may have destroyed cached keys
                if meta.get(KEK_EPOCH) != self._kek_seen:  # another process rotated: wrap under the new epoch
                    self._keys.refresh_epoch()
                    self._kek_seen = meta.get(KEK_EPOCH)
                # never behind the ledger: a clock set back in the file would reuse forgotten versions
                clock = txn.run(ops.Reserve(sum(map(len, group)), max(meta["clock"], view.max_version)))
                outcomes, replaced, uses = self._batches.write(txn, group, clock, view)
                for use in uses:  # durable before COMMIT: the ledger decides a token's use (S9)
                    self._ledger.lift(use.digest, use.version, use.lifts)
                written = [s for o in outcomes if not isinstance(o, BaseException) for s in o]
                # under the backend lock, right after COMMIT: a forget of these records can
                # only commit after this, and its own post-commit drop then removes them again
                txn.after_commit(lambda: self._written(written))
        except BaseException:
            self._keys.clear()  # keys created in a rolled-back transaction must not be reused
            raise
        self._search.remove(replaced)
        return outcomes

    def _written(self, sealed: Iterable[SealedRecord]) -> None:
        self._caches.invalidate_resolved()
        generation = self._caches.generation
        for s in sealed:
            self._caches.remember(s.opened, generation)

    def reauthorize(
        self,
        scope: str,
        key: str | None = None,
        *,
        subject: str | None = None,
        owner: str | None = None,
        through: int | None = None,
    ) -> str:
        """A one-time token that lets the next write to a forgotten target land (W1).

        ``reauthorize(scope)`` covers the scope's subtree; ``reauthorize(scope, key)`` that key in
        that scope. With ``subject=...`` the token also lifts that subject's tombstone (for every
        record carrying it, as the tombstone covered), and is still accepted only by a write
        inside the scope or key it names: one token reopens a target forgotten both ways.

        ``owner=...`` asks for a token only this owner's forgets allow: it is issued only if
        every forget the token could lift (every version of every target it covers, for a scope
        token every forget in or above its subtree) was made with ``forget(..., owner=owner)``;
        else ForgottenError, and no token exists. ``through``: also refuse if one of them is newer
        than this version (a forget that came after the caller's write was issued: a stale write
        is never reopened): StaleWriteError.
        """
        parsed = Scope.parse(scope)
        subject_token = None if subject is None else self._tokens.subject(check_subject(subject))
        owner_token = self._owner_token(owner)
        if through is not None and (type(through) is not int or through < 0):
            raise InvalidValueError("through must be a version (a non-negative int) or None")
        if key is not None:
            key_token = self._tokens.key(check_key(key))
            kind, target = "key", self._tokens.key_exact(self._tokens.scope(parsed), key_token)
        else:
            kind, target = "scope", self._tokens.scope(parsed)
        token = "crt_" + secrets.token_urlsafe(32)
        self._caches.sync()
        with self._backend.write() as txn:
            self._ledger.reconcile_if_changed(txn)  # a token must postdate every logged forget
            if owner_token is not None:  # under the write lock: no forget lands between check and issue
                self._check_own_forgets(parsed, key, subject_token, owner_token, through)
            version = max(txn.run(ops.Count("clock")), self._ledger.view.max_version) + 1
            digest = self._tokens.reauth(token)
            txn.run(ops.InsertReauth(digest, kind, target, version, subject_token))
            txn.run(ops.Advance("clock", version))
            self._ledger.grant(digest, kind, target, version, subject_token)  # a row alone is no token
        return token

    def _check_own_forgets(
        self,
        scope: Scope,
        key: str | None,
        subject: bytes | None,
        owner: bytes,
        through: int | None,
    ) -> None:
        """Raise unless every forget in the way of a token for (``scope``, ``key``, ``subject``)
        -- what it could lift, and the erasures of the scope's own subjects, which refuse its write
        unless it names them -- is ``owner``'s and (with ``through``) no newer than ``through``.
        The ledger decides (S9)."""
        view = self._ledger.view
        view.refresh()
        chain = self._tokens.scope_chain(scope)
        if key is None:
            general = view.subtree_forgets(chain, view.lifted(chain))
        else:
            targets = WriteTargets.build(self._tokens, scope, key, ())
            lifted = view.lifted(targets.general_lift_targets())
            general = view.forget_versions(targets.tombstone_targets(), lifted)
        # the subject erasures in the way too: the scope's own subjects' (a token that does not
        # name them cannot reopen the write) and the one the token names
        subjects = {self._tokens.subject(s) for s in default_subjects(scope)}
        if subject is not None:
            subjects.add(subject)
        named = [f for t in subjects for f in view.forget_versions([t], view.lifted([t]))]
        found = [*general, *named]
        foreign = [v for v, who in found if who != owner]
        if foreign:
            raise ForgottenError(
                f"this target was also forgotten by someone else (the forget at version {max(foreign)}); "
                "only a reauthorization without an owner (whoever may lift others' forgets) reopens it",
                max(foreign),
            )
        late = [v for v, _ in found if through is not None and v > through]
        if late:
            raise StaleWriteError(
                f"the forget at version {max(late)} came after this write was issued; a write racing a "
                "forget of its own target is refused (re-read and write again)",
                max(late),
            )

    def forgets_blocking(
        self, scope: str, key: str, *, subjects: Iterable[str] | None = None
    ) -> builtins.list[int]:
        """The versions of every forget that refuses a write of ``key`` in ``scope`` without a
        reauthorization token (W1), oldest first; empty if such a write would land.

        Content-free, and the same answer a write would get: every forget of the scope and key
        targets (each version, not only the newest of a target) that no lift reaches, and those
        of the scope's default subjects and of ``subjects`` (the write's own). To reopen only
        one's own forgets, ask for the token with ``reauthorize(..., owner=...)``, which checks
        the owner of each; :meth:`blocking_erasures` says what each one is.
        """
        parsed = Scope.parse(scope)
        named = dict.fromkeys([*default_subjects(parsed), *check_subjects(subjects)])
        targets = WriteTargets.build(
            self._tokens, parsed, check_key(key), tuple(self._tokens.subject(s) for s in named)
        )
        self._caches.sync()  # the ledger decides tombstones and lifts (S9), as it does for a write
        view = self._ledger.view
        view.refresh()
        tombstones = view.tombstone_versions(targets.tombstone_targets())
        if not tombstones:
            return []
        lifts = view.lift_versions(targets.lift_targets())
        general, by_subject = blocking(targets, tombstones, lifts)
        if not general and not by_subject:
            return []
        lifted = view.lifted(targets.general_lift_targets())
        found = {v for v, _ in view.forget_versions((*targets.prefix_tokens, *targets.key_targets), lifted)}
        for token in by_subject:
            found.update(v for v, _ in view.forget_versions([token], lifts.get(token, 0)))
        return sorted(found)

    def blocking_erasures(
        self, scope: str, key: str, *, subjects: Iterable[str] | None = None
    ) -> builtins.list[ErasureRequest]:
        """The erasure requests of :meth:`forgets_blocking`'s forgets, oldest first: what refuses
        the write, by kind (``target_kind == "subject"``: a subject's erasure), from the ledger."""
        versions = self.forgets_blocking(scope, key, subjects=subjects)
        view = self._ledger.view
        plans = [view.plans[view.by_version[v]] for v in versions if v in view.by_version]
        return [
            self._erasure.handle(
                p["request_id"], int(p["version"]), Mode(p["mode"]), p["target_kind"], p["requested_at"]
            )
            for p in plans
        ]

    def known_version(self) -> int:
        """The newest version this store's ledger knows (forgets, tokens, lifts): every forget that
        returned before this call, in any process, is at or below it. Pass it as ``through`` to
        :meth:`reauthorize` for a write issued now."""
        self._caches.check_open()
        view = self._ledger.view
        view.refresh()
        return view.max_version

    def service_key(self, purpose: str) -> bytes:
        """A 32-byte key for ``purpose``, derived from the key provider's erasure secret: for what
        a service keeps beside the store (the HTTP server seals its API keys' bindings under one).
        The data directory alone does not give it; the same provider always gives the same key."""
        return service_key(self._provider, purpose)

    # -- reads ---------------------------------------------------------------------------
    def read(self, scope: str, key: str, *, fallthrough: bool = True) -> Record | None:
        """The record under ``key`` in ``scope``, else in its nearest ancestor (R1)."""
        cacheable = type(scope) is str and type(key) is str and type(fallthrough) is bool
        if cacheable and (scope, key, fallthrough) in self._caches.resolved:
            self._caches.sync()  # drops the resolution cache on any change by anyone
            hit = self._caches.resolved.get((scope, key, fallthrough))
            if hit is not None and (hit.expires_at is None or hit.expires_at > self._clock.now()):
                return hit.record()
        parsed = Scope.parse(scope)
        key_token = self._tokens.key(check_key(key))
        chain = self._tokens.scope_chain(parsed)
        tokens = chain[::-1] if check_flag(fallthrough, "fallthrough") else chain[-1:]
        with self._backend.serial():
            self._caches.check_open()
            # nothing changed since the last complete sync (the ledger's hint now, the commit
            # marker with the rows): one statement, no transaction of its own
            if self._caches.quiet_ledger():
                try:
                    with self._backend.statement() as txn:
                        marker, found = txn.run_last(ops.KeyRecords(tokens, key_token))
                        if self._caches.quiet_marker(marker):
                            return self._first_found(txn, found, tokens, (scope, key, fallthrough), cacheable)
                except NeedsSnapshot:
                    pass  # a key not in memory yet: read again, in a snapshot of its own
            if not self._caches.quiet():
                self._caches.sync_locked()  # a complete sync: the next read may take the one statement
            with self._backend.read() as txn:
                # one statement, the read's last: its COMMIT goes in the same round trip
                marker, found = txn.run_last(ops.KeyRecords(tokens, key_token))
                if self._caches.saw(marker):
                    self._caches.sync_locked(changed=True)  # drops what that commit made stale, then we go on
                return self._first_found(txn, found, tokens, (scope, key, fallthrough), cacheable)

    def _first_found(
        self,
        txn: Txn,
        found: Sequence[tuple[RecordRow, LineageRow | None]],
        tokens: Sequence[bytes],
        asked: tuple[str, str, bool],
        cacheable: bool,
    ) -> Record | None:
        """The first visible record of ``found`` in the order of ``tokens`` (the scope, then its
        ancestors), remembered as what ``asked`` (scope, key, fallthrough) resolves to."""
        generation = self._caches.generation
        rows = {r.scope_token: (r, lin) for r, lin in found}
        for token in tokens:
            row = rows.get(token)
            opened = None if row is None else self._checked(txn, row[0], generation, row[1])
            # the slot's key token is a column: a row moved into it must not answer for it
            if opened is not None and opened[1].key == asked[1]:
                if cacheable:
                    self._resolve(*asked, opened[0], generation)
                return opened[1]
        return None

    def _resolve(
        self, scope: str, key: str, fallthrough: bool, record: OpenedRecord, generation: int
    ) -> None:
        with self._caches.lock:
            if generation != self._caches.generation:
                return  # a write or forget landed while we resolved: do not cache a stale answer
            if len(self._caches.resolved) >= RECORD_CACHE_LIMIT:
                self._caches.resolved.clear()
            self._caches.resolved[(scope, key, fallthrough)] = record

    def get(self, record_id: str) -> Record | None:
        """The record with this id, under the same checks as :meth:`read` (R2)."""
        if not isinstance(record_id, str) or not record_id.isalnum() or len(record_id) > 64:
            raise InvalidValueError("record_id must be an id returned by store.write()")
        self._caches.sync()
        generation = self._caches.generation
        with self._backend.read() as txn:
            row = txn.run(ops.Record(record_id))
            return None if row is None else self._materialize(txn, row, generation)

    def list(self, scope: str, *, include_descendants: bool = False) -> list[Record]:
        """Every visible record in ``scope`` (and its descendants), ordered by scope then key."""
        parsed = Scope.parse(scope)
        check_flag(include_descendants, "include_descendants")
        self._caches.sync()
        generation = self._caches.generation
        with self._backend.read() as txn:
            token = self._tokens.scope(parsed)
            tokens = txn.run(ops.SubtreeTokens(token)) if include_descendants else [token]
            found = [self._materialize(txn, row, generation) for row in txn.run(ops.RecordsInScopes(tokens))]
        # the subtree is found through the scopes table's parent column, which is not sealed: the
        # record's sealed scope decides whether it lies inside (a re-parented scope's does not)
        inside = [r for r in found if r is not None and Scope.parse(r.scope).is_within(parsed)]
        return sorted(inside, key=lambda r: (r.scope, r.key))

    def _materialize(
        self, txn: Txn, row: RecordRow, generation: int, lineage: LineageRow | None = None
    ) -> Record | None:
        """The final materialization step (R2): every path to a Record ends here."""
        checked = self._checked(txn, row, generation, lineage)
        return None if checked is None else checked[1]

    def _checked(
        self, txn: Txn, row: RecordRow, generation: int, lineage: LineageRow | None = None
    ) -> tuple[OpenedRecord, Record] | None:
        """A visible, undominated row decrypted (from the cache if it holds this version), and a
        fresh Record of it for the caller."""
        now = self._clock.now()
        # the ledger decides what was forgotten, not the row's marks (S9)
        if not is_visible(row, now) or row.id in self._ledger.view.forgotten:
            return None
        cached = self._caches.records.get(row.id)
        if cached is not None and cached.version == row.version:
            return (cached, cached.record()) if _unexpired(cached, now) else None
        opened = self._crypto.open(txn, row, lineage)
        if opened is None or not _unexpired(opened, now):  # the sealed expiry, not the column
            return None
        record = opened.record()
        if self._dominated(record):
            return None
        self._caches.remember(opened, generation)
        return opened, record

    def _dominated(self, record: Record) -> bool:
        """Does a ledger tombstone newer than the record cover its decrypted scope, key or
        subjects? (The record's version is bound to its ciphertext.)"""
        view = self._ledger.view
        if not view.tombstones:
            return False
        targets = WriteTargets.build(
            self._tokens,
            Scope.parse(record.scope),
            record.key,
            tuple(self._tokens.subject(s) for s in record.subjects),
        )
        versions = view.tombstone_versions(targets.tombstone_targets())
        return any(v > record.version for v in versions.values())

    # -- search --------------------------------------------------------------------------
    def search(
        self,
        scope: str,
        query: str,
        *,
        k: int = 10,
        fallthrough: bool = True,
        include_descendants: bool = False,
        filter: Mapping[str, Any] | None = None,
    ) -> builtins.list[SearchHit]:
        """The ``k`` records most similar to ``query`` in ``scope`` (its ancestors when
        ``fallthrough``, its descendants when ``include_descendants``), best first. Exact search;
        every candidate passes the same final checks as :meth:`read` (R2). Hits with a score of
        zero or less (nothing in common with the query) are left out."""
        parsed = Scope.parse(scope)
        query, k = check_query(query, k)
        check_flag(fallthrough, "fallthrough")
        check_flag(include_descendants, "include_descendants")
        conditions = check_filter(filter)
        qvec = self._search.embed_query(query)
        found: dict[str, Record] = {}
        with self._backend.serial():
            # as read does: the ledger now, before the snapshot; whether another connection
            # committed comes with the clock, read in the snapshot (no statement of its own)
            self._caches.check_open()
            if not self._caches.quiet_ledger():
                self._caches.sync_locked(changed=False)
            with self._backend.read() as txn:
                clock, marker = txn.run(ops.ClockMarker())
                if self._caches.saw(marker):
                    self._caches.sync_locked(changed=True)
                generation = self._caches.generation
                self._search.ensure(txn, self._crypto, clock)
                levels = parsed.prefixes() if fallthrough else [parsed]
                tokens = {self._tokens.scope(p) for p in levels}
                if include_descendants:
                    tokens.update(txn.run(ops.SubtreeTokens(self._tokens.scope(parsed))))

                # the final-step check reads each batch of candidates in one statement, the first
                # batch as the read's last (its COMMIT in the same round trip)
                fetched: dict[str, tuple[RecordRow, LineageRow]] = {}

                def ahead(ids: builtins.list[str]) -> None:
                    fetched.update(txn.run_last(ops.RecordsOfIds(ids)))

                def allow(record_id: str) -> bool:
                    got = fetched.pop(record_id, None)
                    record = None if got is None else self._materialize(txn, got[0], generation, got[1])
                    if record is None or not matches_filter(record.metadata, conditions):
                        return False
                    # the sealed scope decides, not the (unsealed) scope rows the token set came from
                    where = Scope.parse(record.scope)
                    if not (where in levels or (include_descendants and where.is_within(parsed))):
                        return False
                    found[record_id] = record
                    return True

                # hits at or below the embedder's relevance floor are noise, and in a session they would taint
                # the writes: the index leaves them out
                hits = self._search.search(qvec, k, tokens, allow, ahead)
        qvec.fill(0)
        self._search.flush(self._store_vectors)
        return [SearchHit(found[i], score) for i, score in hits]

    def _store_vectors(self, cells: builtins.list[tuple[bytes, str, int]]) -> None:
        """Write sealed vectors (a cache: a failure only means they are embedded again after a restart)."""
        try:
            with self._backend.write() as txn:
                txn.run(ops.StoreVectors(cells))
        except StorageError:
            pass

    # -- access requests -----------------------------------------------------------------
    def export_subject(self, subject: str) -> dict[str, Any]:
        """Everything this store holds about a subject, as JSON (an access request)."""
        token = self._tokens.subject(check_subject(subject))
        self._caches.sync()
        generation = self._caches.generation
        with self._backend.read() as txn:
            ids = txn.run(ops.LineageIdsForSubject(token))
            rows = (txn.run(ops.Record(i)) for i in ids)
            records = [r for r in (self._materialize(txn, row, generation) for row in rows if row) if r]
            requests = [
                r for r in txn.run(ops.Erasures()) if r.target_kind == "subject" and r.target == token
            ]
        records.sort(key=lambda r: (r.scope, r.key))
        return {
            "format": "cenotaph-subject-export/1",
            "subject": subject,
            "exported_at": _now_iso(),
            "records": [r.to_dict() for r in records if not r.derived_from],
            "derived_records": [r.to_dict() for r in records if r.derived_from],
            "erasure_requests": [
                {
                    "id": r.id,
                    "mode": r.mode,
                    "state": r.state,
                    "version": r.version,
                    "requested_at": r.requested_at,
                }
                for r in requests
            ],
        }

    # -- downstream consumers (cenotaph.consumers) ----------------------------------------
    def register_consumer(self, name: str, *, ack_days: int = DEFAULT_ACK_DAYS) -> Consumer:
        """Register a downstream consumer (a summarizer, a dataset builder, a cache): what it takes
        through the returned handle is recorded (ids and versions), and every compliance forget of
        a record it took asks it to delete it and acknowledge within ``ack_days`` days."""
        self._caches.check_open()
        return Consumer(self, self._consumers, self._consumers.register(name, ack_days))

    def consumer(self, consumer_id: str) -> Consumer:
        """The handle of a registered consumer."""
        return Consumer(self, self._consumers, self._consumers.find(consumer_id))

    def consumers(self) -> builtins.list[Consumer]:
        """Every registered consumer, oldest first."""
        return [Consumer(self, self._consumers, info) for info in self._consumers.all()]

    # -- sessions ------------------------------------------------------------------------
    def session(self, scope: str, *, owner: str | None = None) -> StoreSession:
        """A session whose writes record everything it read as ``derived_from`` (W6); with an
        ``owner``, its forgets are that owner's and its writes may re-create what they forgot
        (see :class:`StoreSession`). Use it as a context manager (or ``close()`` it)."""
        self._caches.check_open()
        return StoreSession(self, Scope.parse(scope), owner=owner)

    # -- forgetting ----------------------------------------------------------------------
    def forget(
        self,
        scope: str,
        key: str | None = None,
        *,
        mode: str = "compliance",
        include_ancestors: bool = False,
        exact: bool = False,
        reason: str | None = None,
        owner: str | None = None,
    ) -> ErasureRequest:
        """Forget ``key`` in ``scope`` and every descendant, or (``key=None``) the whole subtree.

        ``exact=True`` forgets ``key`` in ``scope`` alone (the slot: no descendant, and an
        ancestor's copy is neither touched nor in the way); afterwards
        ``read(scope, key, fallthrough=False)`` finds nothing. ``owner`` names who forgets (an
        API key, a connection, an adapter): ``reauthorize(..., owner=...)`` reopens only forgets
        made by that owner. The ledger keeps it as a token, never the name."""
        parsed = Scope.parse(scope)
        if key is not None:
            check_key(key)
        if mode not in tuple(Mode):
            raise InvalidValueError("mode must be 'compliance' or 'operational'")
        check_flag(include_ancestors, "include_ancestors")
        if check_flag(exact, "exact") and (key is None or include_ancestors):
            raise InvalidValueError(
                "an exact forget covers one key in one scope: give a key, and leave include_ancestors False"
            )
        self._check_reason(reason)
        return self._erasure.forget_scope(
            parsed, key, mode, include_ancestors, exact=exact, owner=self._owner_token(owner)
        )

    def forget_subject(
        self, subject: str, *, reason: str | None = None, owner: str | None = None
    ) -> ErasureRequest:
        """Compliance-forget everything about a subject, including records derived from it."""
        check_subject(subject)
        self._check_reason(reason)
        owner_token = self._owner_token(owner)
        return self._erasure.forget_subject(self._tokens.subject(subject), owner_token)

    def _owner_token(self, owner: object) -> bytes | None:
        name = check_owner(owner)
        return None if name is None else self._tokens.owner(name)

    @staticmethod
    def _check_reason(reason: object) -> None:
        # The reason is the caller's note; it is never stored (it may carry personal data).
        if reason is not None and not isinstance(reason, str):
            raise InvalidValueError("reason must be a string")

    # -- erasure requests (the erasure side's entrance: erasure/entrance.py) -----------------
    def erasure(self, request_id: str) -> ErasureRequest:
        """The handle of an earlier forget, to poll."""
        return self._erasure.request(request_id)

    def erasures(self) -> builtins.list[ErasureRequest]:
        """Every erasure request this store has, oldest first."""
        return self._erasure.all_requests()

    def erasure_statuses(self) -> builtins.list[tuple[ErasureRequest, ErasureStatus]]:
        """Every erasure request, oldest first, with its status (as its ``status()`` says),
        read in one transaction however many there are: for a listing of them all."""
        return self._erasure.all_statuses()

    def confirm_erasure(self, request_id: str) -> ErasureStatus:
        """The request's status if verified; else ErasureNotProvableError naming every gap (and a
        background purge's failure, if no caller has been told of it yet)."""
        return self._erasure.confirm(request_id)

    def attest(
        self, request_id: str, *, requester_key_id: str | None = None, requester_name: str | None = None
    ) -> Certificate:
        """A signed, content-free certificate of a verified compliance erasure (S6), with the NIST
        SP 800-88 Rev. 2 fields: ``requester_key_id`` is the API key that asked for the erasure, and
        a name appears only if ``requester_name`` is given."""
        return self._erasure.attest(request_id, requester_key_id, requester_name)

    def purge(self, *, progress: Progress | None = None) -> PurgeReport:
        """Remove erased rows, truncate the WAL, clear caches, then verify by scanning (S3, S4).
        A large forget still being applied is finished first."""
        check_callback(progress, "progress")
        return self._erasure.purge_all(progress)

    def backup(self, dest: str | os.PathLike[str]) -> BackupInfo:
        """A consistent copy holding ciphertext only, registered with the key provider. ``dest``
        must be a new or empty directory outside any data directory (a copy inside one would be
        a file that store's erasure scans must find clean)."""
        path = check_path(dest, "the backup destination").resolve()
        check_outside_stores(path, "the backup destination")
        return self._erasure.backup(path)

    def release_backup(self, backup_id: str) -> None:
        """End a backup's retention so rotate_keys() may destroy the epochs only it needed."""
        self._caches.check_open()
        if not isinstance(backup_id, str):
            raise InvalidValueError("backup_id must be the id returned by store.backup()")
        self._erasure.release_backup(backup_id)

    def backups(self) -> dict[str, builtins.list[int]]:
        """Registered backups: id -> the KEK epochs each one keeps alive."""
        self._caches.check_open()
        return self._provider.backups()

    def retention(self) -> builtins.list[Retention]:
        """Every KEK epoch that a registered backup or a pending erasure request keeps from being
        destroyed by rotation: who holds it, why, and what releases it."""
        self._caches.sync()
        return self._erasure.retention()

    def key_epochs(self) -> dict[int, dict[str, Any]]:
        """Every live KEK epoch and what keeps it alive: ``current`` (new keys are wrapped under
        it), ``wraps_live_keys``, ``backups`` (registered backups that need it) and
        ``pending_erasures`` (requests whose probes it seals until they verify; :meth:`retention`
        says why each holds it and what releases it). An epoch held by none of these is destroyed
        by the next :meth:`rotate_keys`."""
        held = self.retention()
        with self._backend.read() as txn:
            in_use = txn.run(ops.EpochsInUse())
        current = self._provider.current_epoch()
        return {
            epoch: {
                "current": epoch == current,
                "wraps_live_keys": epoch in in_use,
                "backups": [r.id for r in held if r.epoch == epoch and r.holder == "backup"],
                "pending_erasures": [r.id for r in held if r.epoch == epoch and r.holder == "erasure"],
            }
            for epoch in sorted(self._provider.live_epochs())
        }

    def rotate_keys(self, *, progress: Progress | None = None) -> RotationReport:
        """Rewrap every live key under a new KEK epoch; destroy epochs no registered backup needs."""
        check_callback(progress, "progress")
        return self._erasure.rotate(progress)

    def verify_audit(self) -> dict[str, Any]:
        """Check the audit chain against the head anchored in the key provider (S7), and the
        database against the key provider's ledger (S9); raises StorageError naming every edit."""
        self._caches.sync()  # a forget another process logged but never committed is replayed first
        result = self._erasure.verify_audit()
        found = self._erasure.integrity()
        if found:
            raise StorageError(
                "the database was altered (the key provider's ledger says otherwise): "
                + "; ".join(found)
                + ". The store refuses what these rows would allow; restore from a backup with "
                "cenotaph.restore() and investigate"
            )
        return result

    def check_integrity(self) -> builtins.list[str]:
        """Every way the database disagrees with the key provider's ledger (S9), one sentence
        each (counts only); empty when it is a faithful cache. Verifies the audit log first."""
        self._caches.sync()
        self._erasure.verify_audit()
        return self._erasure.integrity()

    def tree_head(self) -> dict[str, Any]:
        """A signed RFC 9162 tree head over every audit entry: ``{"tree_size", "root_hash",
        "timestamp", "signature"}`` (hex; Ed25519 under :attr:`public_key`). Keep it: a later head
        proves with :meth:`consistency_proof` that it extends this one."""
        self._caches.check_open()
        return self._log.head()

    def consistency_proof(self, old_size: int) -> dict[str, Any]:
        """``{"tree_head", "proof"}``: a signed head now and the RFC 9162 proof that the log of
        ``old_size`` entries (an earlier head's ``tree_size``) is its prefix; check it with
        :func:`cenotaph.verify_consistency`."""
        self._caches.check_open()
        return self._log.consistency(old_size)

    @property
    def public_key(self) -> str:
        """The raw Ed25519 public key that signs this store's certificates, as 64 hex characters."""
        self._caches.check_open()
        return self._erasure.signer().public_key_hex


def service_key(provider: KeyProvider, purpose: str) -> bytes:
    """What :meth:`Store.service_key` answers, from the key provider alone (no store opened)."""
    if not isinstance(purpose, str) or not purpose:
        raise InvalidValueError("purpose must be a non-empty string naming what the key is for")
    return derive(provider.erasure_secret(), b"cenotaph-service-key\0" + purpose.encode())


def open_store(
    location: str | os.PathLike[str],
    *,
    key_provider: KeyProvider | None = None,
    auto_purge: str = "background",
    embedder: Embedder | None = None,
    replicas: Sequence[str] = (),
    read_replicas: Sequence[str] = (),
    create: bool = True,
    clock: Clock = SYSTEM_CLOCK,
) -> Store:
    """Open (creating if needed) a store: a directory (embedded SQLite) or a postgresql:// URL.

    A PostgreSQL store keeps its tables in one schema of the database: the URL's ``?schema=``,
    an unquoted lower-case identifier, default ``cenotaph`` (``postgresql://app@db/prod`` is
    schema ``cenotaph`` of database ``prod``). It has no data directory for a default keyring:
    its key provider is ``key_provider``, else the keyring directory ``$CENOTAPH_KEYRING`` names
    (sealed with ``$CENOTAPH_MASTER_KEY`` if that is set). ``replicas`` lists the addresses of
    the primary's streaming replicas: a purge waits for each to replay past it, and one that
    lags, is paused or cannot be reached keeps the erasure ``shredded`` with the replica named
    (a data directory has no replicas). ``read_replicas`` lists streaming replicas that may also
    serve reads: a read transaction goes to one only when it has replayed past every commit this
    process has seen (every forget included, its own and other processes'), else to the primary;
    writes always go to the primary, and a purge waits for these replicas too.

    A store is created only where none is, and only for a key provider that belongs to no store
    yet: a keyring whose ledger already names a store, opened on a location holding none (a
    mistyped directory, a URL naming the wrong ``?schema=`` or none), is refused, saying so.
    ``create=False`` refuses any location holding no store. A first open that is refused leaves
    nothing behind on PostgreSQL (the schema or tables it made are dropped again).

    ``auto_purge`` says what a compliance forget does about its purge (row removal, WAL
    truncation, the verifying scan):

    - ``"background"`` (default): the forget returns ``shredded`` (tombstone and key destruction
      durable) and a worker thread of this store purges and verifies right after, one scan for
      every request pending; ``request.wait()`` returns once it is ``verified``;
    - ``"sync"``: the forget runs :meth:`Store.purge` before it
      returns, so it usually returns ``verified``;
    - ``"off"``: nothing is purged until you call :meth:`Store.purge` (or
      ``wait()``).

    ``clock`` is the wall clock every ``ttl`` is measured by (see :mod:`cenotaph.clock`); the
    system's by default.
    """
    purge_mode(auto_purge)
    if not isinstance(clock, Clock):
        raise InvalidValueError(
            "clock must implement cenotaph.clock.Clock: a now method giving seconds since the epoch"
        )
    if key_provider is not None and not isinstance(key_provider, KeyProvider):
        raise InvalidValueError("key_provider must implement cenotaph.KeyProvider (e.g. LocalKeyring)")
    if embedder is not None and not isinstance(embedder, Embedder):
        raise InvalidValueError("embedder must implement cenotaph.Embedder (embed(texts) -> matrix)")
    for name, listed in (("replicas", replicas), ("read_replicas", read_replicas)):
        if isinstance(listed, str) or not all(isinstance(r, str) for r in listed):
            raise InvalidValueError(f"{name} must be a list of postgresql:// addresses, one per replica")
    if not isinstance(create, bool):
        raise InvalidValueError("create must be True or False")
    place = locate(location, create=create)  # checked (a data directory is created), nothing opened yet
    if place.directory is not None:
        check_not_restoring(place.directory)
    if key_provider is None and place.url is not None:
        keyring_env_location()  # no keyring named: said before the server is asked anything
    found = place.survey()  # a PostgreSQL server is asked whether its schema holds a store
    if not create and not found.existing:
        raise InvalidValueError(found.no_store)
    # the provider before the backend: the default keyring tells a new store from one whose
    # keyring is missing by whether the database file exists yet
    provider = key_provider if key_provider is not None else _default_provider(place, found)
    if not found.existing:
        _refuse_a_foreign_keyring(place, found, provider)
    options: dict[str, Any] = {"replicas": list(replicas)} if replicas else {}
    if read_replicas:
        options["read_replicas"] = list(read_replicas)
    # a store found is opened, never made again if it went away since
    backend = place.open(create=not found.existing, **options)
    try:
        return Store(backend, provider, auto_purge=auto_purge, embedder=embedder, clock=clock)
    except BaseException:
        discard_created(backend)  # the store's connections are closed; what it made goes too
        raise


def _default_provider(place: Location, found: Found) -> KeyProvider:
    if place.directory is not None:
        return keyring_from_env(place.directory)
    return keyring_from_env_only(found.where, store_exists=found.existing)


def _refuse_a_foreign_keyring(place: Location, found: Found, provider: KeyProvider) -> None:
    """A key provider that belongs to a store never starts another: a location without a store,
    opened with it, is a mistyped location (one keyring, one store). Refused before anything is
    created; a data directory made empty by locating it is removed again."""
    if not _belongs_to_a_store(provider):
        return
    if place.made_directory and place.directory is not None:
        with suppress(OSError):  # only while empty: nothing else is ever removed
            place.directory.rmdir()
    raise InvalidValueError(
        f"{found.where} holds no cenotaph store, but this key provider already belongs to one "
        f"(its ledger names that store's audit chain): open that store's {_own_location(place)}, "
        "or give a new store a new keyring"
    )


def _own_location(place: Location) -> str:
    if place.url is None:
        return "data directory"
    return f"schema (?schema=NAME; a URL without it names schema {POSTGRES_DEFAULT_SCHEMA!r})"


def _belongs_to_a_store(provider: KeyProvider) -> bool:
    """Has a store already started its audit chain on this key provider (or anchored or logged a
    forget)? Then a location without a store is a mistake, not a new store (one keyring, one store)."""
    return any(e.get("kind") in ("chain", "anchor", "forget") for e in provider.ledger())


def restore(
    src: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    key_provider: KeyProvider,
    progress: Progress | None = None,
) -> Store:
    """Restore a backup into an empty ``target`` directory with the source store's key provider
    (a PostgreSQL store's backup into a new or empty schema: ``postgresql://...?schema=NEW``).

    Until the copy has committed its own audit chain id and replayed the ledger, ``target`` is
    marked unfinished and :func:`open` refuses it; after a crash, run the same restore again. A
    restore refused before that point (a wrong key provider, say) removes what it copied.

    The newest forget ledger is replayed before the restored store serves its first read, then
    purged, so a backup taken before a forget resurrects nothing (S5). Copies no key material.

    A PostgreSQL backup is loaded in one transaction that creates the schema, so a restore
    killed while loading leaves none; one killed before the restored store's first commit
    leaves the schema marked, which an open refuses and the same restore run again replaces.

    Restore replaces a lost store: the restored store shares the source's keyring, so do not keep
    using both (rotating keys in one destroys epochs the other still needs).
    """
    if not isinstance(key_provider, KeyProvider):
        raise InvalidValueError(
            "restore needs the source store's key provider: pass key_provider=LocalKeyring(<keyring dir>)"
        )
    check_callback(progress, "progress")
    backup = check_path(src, "the backup")
    if is_postgres_url(target):
        return _finish_restore(_load_postgres(backup, str(target), key_provider), progress)
    target_path = check_path(target, "the restore target")  # a Path: never read as a URL
    _refuse_postgres_backup(backup)
    with restoring(backup, target_path):
        # committed in its constructor: its own chain id, the ledger replayed; then it may serve
        store = Store(open_backend(target_path), key_provider, restored=True)
        try:
            store.verify_audit()  # before its first read: an altered copy is removed, not served
        except BaseException:
            store.close()
            raise
    return _finish_restore(store, progress)


def _load_postgres(backup: Path, url: str, key_provider: KeyProvider) -> Store:
    """Load a PostgreSQL store's backup into the (new or empty) schema ``url`` names, then open
    it as :func:`restore` opens a restored copy; a restore refused once loaded drops what it loaded."""
    with load_snapshot(backup, url) as restored:
        # its first commit puts the source's chain id back, verifies the copy's log, mints its own
        store = Store(restored, key_provider, restored=True)
        try:
            store.verify_audit()  # before its first read: an altered copy is removed, not served
        except BaseException:
            store.close()
            raise
    return store


def _refuse_postgres_backup(backup: Path) -> None:
    """A PostgreSQL store's backup (a logical dump) restores into a schema, never a directory."""
    if holds_database_snapshot(backup):
        raise InvalidValueError(
            "the backup is a PostgreSQL store's (a logical dump); restore it into a schema: "
            "postgresql://...?schema=NEW"
        )


def _finish_restore(store: Store, progress: Progress | None) -> Store:
    try:
        store.purge(progress=progress)
    except BaseException:
        store.close()  # a purge cut short resumes on the next purge; the store itself is whole
        raise
    return store
