"""What one store holds in this process's memory, and keeping it fresh.

Decrypted records, resolved reads, unwrapped keys and the search index's vectors are caches of
the database; the ledger decides what was forgotten. :class:`StoreCaches` owns them all with the
state that says how fresh they are (the forget epoch they were valid at, a sync left half done),
so the store and the erasure side share one object: a forget or a purge drops what memory holds
of its records through it, and every call of either side syncs through it first. It reads the
ledger (``cenotaph.ledger``, below it) and nothing of the erasure side, which holds it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

from .backends import ops
from .crypto.keys import KeyChain
from .crypto.ledger_hint import LedgerHint
from .crypto.provider import KeyProvider
from .errors import InvalidValueError
from .index.search import SearchIndex
from .ledger.journal import Ledger
from .locking import LockedBackend
from .records import OpenedRecord

__all__ = ["RECORD_CACHE_LIMIT", "StoreCaches"]

RECORD_CACHE_LIMIT = 65_536

T = TypeVar("T")


def _no_hint() -> bytes | None:
    return None


class StoreCaches:
    def __init__(
        self,
        backend: LockedBackend,
        provider: KeyProvider,
        keys: KeyChain,
        search: SearchIndex,
        ledger: Ledger,
    ) -> None:
        self._backend = backend
        self._provider = provider
        self._keys = keys
        self._search = search
        self._ledger = ledger
        self.lock = threading.Lock()
        # decrypted records by id (checked against the row); every hit hands out a fresh Record
        self.records: dict[str, OpenedRecord] = {}
        # (scope, key, fallthrough) -> what read() resolved to; valid only while nobody commits:
        # cleared by our own writes and forgets, and by sync() when another connection committed
        self.resolved: dict[tuple[str, str, bool], OpenedRecord] = {}
        self.generation = 0  # bumped whenever resolved reads are dropped
        self.forget_epoch = -1  # the database's forget epoch memory was last valid at
        self.sync_pending = False
        self.closed = False
        self._marker: Hashable | None = None  # the backend's change marker when last looked at
        self._plans_seen = -1  # the forgets the ledger view held when the backend was last told
        # the backend's change marker and the ledger's hint when the last complete sync began:
        # while both are unchanged nobody else committed and nobody logged a forget since, and
        # memory is as fresh as that sync left it. A provider without a hint: always None
        self._quiet: tuple[Hashable, bytes] | None = None
        self._ledger_hint: Callable[[], bytes | None] = getattr(provider, "ledger_hint", _no_hint)
        # called after a sync replayed a forget whose chunks are left (the erasure worker's wake)
        self.on_replayed_chunks: Callable[[], None] = lambda: None

    def check_open(self) -> None:
        if self.closed:
            raise InvalidValueError("this store is closed; open it again with cenotaph.open(...)")

    def drop(self) -> None:
        """Drop every decrypted record, resolved read and unwrapped key."""
        with self.lock:
            self.records.clear()
        self.invalidate_resolved()
        self._keys.clear()

    def invalidate_resolved(self) -> None:
        with self.lock:
            self.resolved.clear()
            self.generation += 1

    def forget(self, ids: Iterable[str] | None) -> int:
        """Drop every decrypted record and unwrapped key (so a derived copy the lineage index
        missed cannot be served from memory: W3 holds in-process too; both caches are bounded),
        and the vectors of ``ids`` -- or all vectors when another process forgot something we
        cannot enumerate. Returns index entries left for ``ids``."""
        self.drop()
        if ids is None:
            self._search.reset()
            return 0
        wanted = set(ids)
        self._search.remove(wanted)
        return self._search.count_of(wanted)

    def forget_all(self) -> None:
        """A chunked plan was applied whole (under the backend lock, right after its COMMIT): a
        swept record may be anywhere in memory, and the next sync re-reads the forget epoch."""
        self.forget(None)
        self.forget_epoch = -1

    def remember(self, record: OpenedRecord, generation: int) -> None:
        """Cache a decrypted record, unless caches were dropped since ``generation`` was taken
        (a forget landed meanwhile: the record may be one it covers)."""
        with self.lock:
            if generation != self.generation:
                return
            if len(self.records) >= RECORD_CACHE_LIMIT:
                self.records.clear()  # bounded: a forget clears it whole, so keep that cheap
            self.records[record.id] = record

    def saw(self, marker: Hashable) -> bool:
        """Has another connection committed since the marker last seen (``Backend.marker``, or
        ``ops.Marker`` read with rows)? Remembers ``marker``. Call under ``backend.serial()``."""
        changed = marker != self._marker
        self._marker = marker
        return changed

    def sync(self) -> None:
        """Before serving anything: apply forgets another process logged, drop stale caches.

        When nobody committed and nobody appended to the ledger since the last complete sync
        (:meth:`quiet`), there is nothing to apply: one ``data_version`` and a compare of the
        ledger hint in memory, no ``stat``."""
        self.check_open()
        if self.quiet():
            return
        # One thread at a time: a thread that sees the change must finish dropping the caches
        # before any other thread, which no longer sees it, may answer from them. The lock is the
        # store's own (re-entrant, see locking.py), so a thread inside a transaction can sync too.
        with self._backend.serial():
            self.sync_locked()

    def quiet(self) -> bool:
        """Has no other connection committed and nobody appended to the ledger since the last
        complete sync began (the backend's change marker and the provider's ledger hint are the
        ones it began at), and is all this process read of the ledger in the database? Then a
        sync has nothing to do. (Our own commits leave the marker alone: each one drops what it
        makes stale itself.)"""
        if self._quiet is None or self.sync_pending or not self._ledger.settled():
            return False  # settled: a transaction of ours may have replayed a logged forget, then rolled back
        return (self._backend.marker(), self._ledger_hint()) == self._quiet

    def quiet_ledger(self) -> bool:
        """:meth:`quiet`'s ledger half, for a read that gets the change marker with its rows
        (one statement): nobody appended to the ledger since the last complete sync began. Read
        it before the rows; then :meth:`quiet_marker` of the marker read with them completes it."""
        quiet = self._quiet
        if quiet is None or self.sync_pending or not self._ledger.settled():
            return False
        return self._ledger_hint() == quiet[1]

    def quiet_marker(self, marker: Hashable) -> bool:
        """:meth:`quiet`'s other half: no other connection committed before ``marker`` was read
        (with the rows) since the last complete sync began."""
        quiet = self._quiet
        return quiet is not None and marker == quiet[0]

    def sync_around(self, read: Callable[[], tuple[Hashable, T]]) -> T:
        """What ``read`` returns beside the change marker of its snapshot, with a complete sync
        around it that sends no statement of its own (as a search syncs): the ledger half before
        the snapshot (:meth:`quiet_ledger`, else a sync of it), then, if the marker shows
        another connection's commit, the rest (:meth:`sync_locked`)."""
        with self._backend.serial():
            self.check_open()
            if not self.quiet_ledger():
                self.sync_locked(changed=False)
            marker, result = read()
            if self.saw(marker):
                self.sync_locked(changed=True)
            return result

    def quiet_hint(self) -> bytes | None:
        """:meth:`quiet_ledger` for a write that reads the change marker in its own first round
        trip: the ledger hint it was quiet at (read now, before the marker), else None (then the
        write syncs completely before it begins, as a read does)."""
        quiet = self._quiet
        if quiet is None or self.sync_pending or not self._ledger.settled():
            return None
        hint = self._ledger_hint()
        return hint if hint == quiet[1] else None

    def sync_in_write(self, marker: Hashable, hint: bytes, forget_epoch: int) -> None:
        """A write found the ledger quiet (:meth:`quiet_hint` gave ``hint``) and did not sync
        before it began; it read the change marker first in its transaction, then the forget
        epoch, and the marker shows another connection's commit since the last complete sync.
        What :meth:`sync_locked` does then, from what the write read: no round trip of its own.
        Call under ``backend.serial()``, inside the write, before it uses a cached key.

        The ledger needs no replay here (its hint has not moved since a complete sync, which
        replayed what it lacked); dominance is the ledger view's, refreshed inside the locked
        transaction as ever. When the ledger is still as that sync left it, memory is now as fresh
        as a sync begun at ``marker``: quiet from it (the marker was read before the epoch)."""
        self._quiet = None
        self.sync_pending = True  # a failure half way: the next call syncs completely
        self._marker = marker
        self.invalidate_resolved()
        self._keys.drop_destroyed_epochs()  # a rotation elsewhere commits before it destroys
        mark = self._provider.ledger_mark()
        self._learn_ledger(mark)
        self._learn_epoch(forget_epoch)
        self.sync_pending = False
        if LedgerHint.settled(hint) and self._ledger.settled() and not self._ledger.changed(mark):
            self._quiet = (marker, hint)

    def _learn_ledger(self, mark: int | None) -> None:
        """Refresh the ledger view to ``mark``: a forget in the ledger decides at once (S9), in any
        process; forgets gained here (or by another thread's refresh) reach the backend, so no
        read from a replica may predate them."""
        if self._ledger.view.refresh(mark):
            self.forget(None)
        plans = len(self._ledger.view.plans)
        if plans != self._plans_seen:
            self._plans_seen = plans
            self._backend.forgets_learnt()

    def _learn_epoch(self, epoch: int) -> None:
        """The store's forget epoch as just read: one that moved drops every cached record."""
        if epoch != self.forget_epoch:
            self.forget(None)
            self.forget_epoch = epoch

    def sync_locked(self, changed: bool | None = None) -> None:
        # the marker moves only on other connections' commits; a replay is our own commit.
        # Until this sync completes, the next one acts as if something changed: a failure half
        # way (a busy ledger replay, say) must not leave the change consumed and the caches kept.
        # ``changed``: the caller read the marker itself (with its rows), else it is read here
        # taken before anything is read; an append under way (or dead half way) gives no quiet,
        # nor does a caller that read the marker itself (it is not known here then)
        hint, self._quiet = self._ledger_hint(), None
        marker = self._backend.marker() if changed is None else None
        check = (self.saw(marker) if changed is None else changed) or self.sync_pending
        self.sync_pending = True
        if check:
            self.invalidate_resolved()
            self._keys.drop_destroyed_epochs()  # a rotation elsewhere commits before it destroys
        # inside a transaction (a callback called back into the store) the ledger waits for its
        # owner: a replay here could not begin its own, and would read uncommitted rows
        mark = self._provider.ledger_mark()
        self._learn_ledger(mark)
        if not self._backend.in_transaction() and self._ledger.changed(mark):
            with self._backend.read() as txn:
                missing = self._ledger.missing(txn)
            if missing:
                with self._backend.write() as txn:
                    if self._ledger.reconcile(txn):
                        txn.after_commit(self.on_replayed_chunks)  # a replayed large plan's chunks
        if self._ledger.take_replayed() or check:
            self.invalidate_resolved()  # someone committed: a read may now resolve differently
            with self._backend.read() as txn:
                epoch = txn.run(ops.Count("forget_epoch"))
            self._learn_epoch(epoch)
        self.sync_pending = False
        # inside a transaction the ledger's replay waited for its owner: no quiet then
        if (
            marker is not None
            and hint is not None
            and LedgerHint.settled(hint)
            and not self._backend.in_transaction()
        ):
            self._quiet = (marker, hint)
