"""Cross-connection cache invalidation under threads (R2, W1).

A store learns that another process committed from SQLite's ``data_version``, which it reads
once per operation, and that a forget was logged from the keyring's ledger hint (in memory). The race suite once caught a read that started after another process's
forget had returned and still answered from the resolution cache: one thread had consumed the
change and was still dropping the caches when a second thread, seeing no change, served from
them. These tests hold the first thread inside its invalidation and check what the second sees.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from tests.kit.checks import present

import cenotaph

SCOPE = "tenant:acme/user:alice"


def _hold_first_invalidation(store: cenotaph.Store) -> tuple[threading.Event, threading.Event]:
    """Make the store's next cache invalidation block until released; (entered, release)."""
    entered, release = threading.Event(), threading.Event()
    original = store._caches.invalidate_resolved
    calls = {"n": 0}

    def slow() -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            entered.set()
            assert release.wait(10), "the test never released the invalidation"
        original()

    store._caches.invalidate_resolved = slow  # type: ignore[method-assign]
    return entered, release


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # reported to the test, never swallowed
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)  # a deadlocked thread must not hang pytest
    thread.start()
    return thread, out


def test_a_read_after_another_connections_forget_never_serves_the_cache(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path) as reader, cenotaph.open(tmp_path) as forgetter:
        reader.write(SCOPE, "diagnosis", "flu")
        reader.write(SCOPE, "other", "x")
        assert reader.read(SCOPE, "diagnosis") is not None  # now in the resolution cache
        forgetter.forget(SCOPE, "diagnosis", mode="compliance")  # "another process" forgot it

        entered, release = _hold_first_invalidation(reader)
        first, first_out = _in_thread(lambda: reader.read(SCOPE, "other"))  # sees the change
        assert entered.wait(10)
        # this read starts after the forget returned; the first thread is mid-invalidation
        second, second_out = _in_thread(lambda: reader.read(SCOPE, "diagnosis"))
        second.join(0.3)
        served_early = not second.is_alive()
        release.set()
        first.join(10)
        second.join(10)
        assert "error" not in first_out and "error" not in second_out
        assert second_out["value"] is None, "a read after the forget was answered from a stale cache"
        assert not served_early or second_out["value"] is None
        assert first_out["value"] is not None and first_out["value"].value == "x"


def test_a_record_decrypted_before_a_forget_is_not_cached_after_it(tmp_path: Path) -> None:
    """A thread that decrypted a record before the caches were dropped must not put it back."""
    with cenotaph.open(tmp_path) as store:
        written = store.write(SCOPE, "diagnosis", "flu")
        generation = store._caches.generation
        store._caches.drop()  # what a forget does, between the decrypt and the remember
        store._caches.remember(written, generation)  # type: ignore[arg-type]  # only its id matters here
        assert written.id not in store._caches.records
        store._caches.remember(written, store._caches.generation)  # type: ignore[arg-type]
        assert written.id in store._caches.records


def test_the_tombstone_set_sees_another_connections_forget(tmp_path: Path) -> None:
    """The in-memory tombstone set is the ledger's: a forget elsewhere extends it."""
    with cenotaph.open(tmp_path) as writer, cenotaph.open(tmp_path) as forgetter:
        writer.write(SCOPE, "diagnosis", "flu")  # the set now holds no tombstone
        forgetter.forget(SCOPE, "diagnosis", mode="operational")
        try:
            writer.write(SCOPE, "diagnosis", "flu again")
        except cenotaph.ForgottenError:
            pass
        else:
            raise AssertionError("a write after another connection's forget landed")
        writer.write(SCOPE, "unrelated", "ok")  # not covered: lands without a query


def test_dominance_holds_over_many_forgets_and_a_token(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path) as store:
        for key in ("a", "b", "c"):
            store.write(SCOPE, key, 1)
            store.forget(SCOPE, key, mode="operational")
        for key in ("a", "b", "c"):
            with pytest.raises(cenotaph.ForgottenError):
                store.write(SCOPE, key, 2)
        store.write(SCOPE, "d", 2)
        token = store.reauthorize(SCOPE, "b")
        assert store.write(SCOPE, "b", 3, reauthorization=token).value == 3


def _crash_after_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next forget stop like a crash after its ledger entry is durable, before COMMIT."""
    from cenotaph.faults import fault_point as original  # what ledger_module.fault_point is
    from cenotaph.ledger import journal as ledger_module

    def crash(name: str) -> None:
        if name == "forget.ledgered":
            monkeypatch.setattr(ledger_module, "fault_point", original)
            raise RuntimeError("simulated crash after the ledger append")
        original(name)

    monkeypatch.setattr(ledger_module, "fault_point", crash)


def test_a_replay_inside_a_refused_write_is_not_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write transaction that replays a logged forget and then fails must leave nothing behind:
    neither the ledger position (the forget must be replayed again) nor the replayed tombstones'
    epoch in the tombstone filter (a later forget would reuse that epoch number)."""
    with cenotaph.open(tmp_path) as crashed, cenotaph.open(tmp_path) as store:
        store.write(SCOPE, "k", 1)
        store.write(SCOPE, "other", 1)
        _crash_after_ledger(monkeypatch)
        with pytest.raises(RuntimeError):
            crashed.forget(SCOPE, "k", mode="operational")  # in the ledger, not in the database
        # the entry lands between the store's sync and its write transaction
        monkeypatch.setattr(store._caches, "sync", lambda: None)
        with pytest.raises(cenotaph.ForgottenError):
            store.write(SCOPE, "k", 2)  # replays the forget, is refused by it, rolls back
        monkeypatch.undo()
        store.forget(SCOPE, "other", mode="operational")
        with pytest.raises(cenotaph.ForgottenError):
            store.write(SCOPE, "other", 3)
        with pytest.raises(cenotaph.ForgottenError):
            store.write(SCOPE, "k", 3)
        assert store.read(SCOPE, "k") is None


def test_a_failed_sync_does_not_consume_the_change(tmp_path: Path) -> None:
    """A sync that fails half way (a busy ledger read) must not leave stale caches behind."""
    with cenotaph.open(tmp_path) as reader, cenotaph.open(tmp_path) as forgetter:
        reader.write(SCOPE, "diagnosis", "flu")
        assert reader.read(SCOPE, "diagnosis") is not None  # cached
        forgetter.forget(SCOPE, "diagnosis", mode="compliance")
        original = reader._ledger.missing

        def busy_once(txn: Any) -> bool:
            reader._ledger.missing = original  # type: ignore[method-assign]
            raise cenotaph.StorageError("the data directory is locked by another process for too long")

        reader._ledger.missing = busy_once  # type: ignore[method-assign]
        with pytest.raises(cenotaph.StorageError):
            reader.read(SCOPE, "diagnosis")
        assert reader.read(SCOPE, "diagnosis") is None


@pytest.mark.timeout(60)  # the bug this guards against is a deadlock: fail, never hang
def test_a_callback_under_the_write_lock_can_read_while_others_read(tmp_path: Path) -> None:
    """rotate_keys calls its progress callback inside its write transaction; a callback that reads
    the store while another thread reads must not deadlock on the sync lock."""
    store = cenotaph.open(tmp_path)  # closed only if nothing deadlocked (close takes the lock)
    store.write_many([{"scope": SCOPE, "key": f"k{i}", "value": i} for i in range(1200)])
    stop = threading.Event()

    def keep_reading() -> None:
        while not stop.is_set():
            store.read(SCOPE, "k1")

    reader = threading.Thread(target=keep_reading, daemon=True)
    reader.start()
    seen: list[int] = []

    def progress(done: int, _total: int) -> None:
        seen.append(done)
        assert store.read(SCOPE, "k2") is not None  # e.g. a progress display peeking at the store

    rotation, out = _in_thread(lambda: store.rotate_keys(progress=progress))
    try:
        rotation.join(20)
        assert not rotation.is_alive(), "rotation deadlocked with a reading thread"
    finally:
        stop.set()
        reader.join(5)
    assert "error" not in out
    assert seen
    store.close()


class _Gate:
    """Holds a post-commit step, but only in the thread running the action under test."""

    def __init__(self) -> None:
        self.hold, self.release = threading.Event(), threading.Event()
        self._acting = threading.local()

    def acting(self) -> bool:
        return bool(getattr(self._acting, "on", False))

    def pause(self) -> None:
        """Call from inside the hooked step."""
        if self.acting():
            self.hold.set()
            self.release.wait(10)

    def reads_miss_while_held(self, store: cenotaph.Store, action: Any, key: str) -> None:
        """Run ``action`` in a thread; while it is held, reads of ``key`` (with and without
        fall-through) from another thread must find nothing."""

        def act() -> None:
            self._acting.on = True
            action()

        actor, acted = _in_thread(act)
        assert self.hold.wait(10)
        reader, out = _in_thread(lambda: (store.read(SCOPE, key, fallthrough=False), store.read(SCOPE, key)))
        reader.join(0.3)
        self.release.set()
        reader.join(10)
        actor.join(10)
        assert "error" not in out and "error" not in acted
        assert out["value"] == (None, None)


def test_own_forget_is_dropped_from_memory_before_anyone_sees_its_commit(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path, auto_purge="off") as store:
        store.write(SCOPE, "k", "secret")
        assert store.read(SCOPE, "k") is not None  # cached
        gate = _Gate()
        real = store._caches.forget

        def slow(ids: Any) -> int:
            gate.pause()
            return real(ids)

        store._caches.forget = slow  # type: ignore[method-assign]
        gate.reads_miss_while_held(store, lambda: store.forget(SCOPE, "k", mode="compliance"), "k")


def test_a_replay_is_applied_to_memory_before_anyone_sees_its_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that replays another process's logged forget commits it; until this process's
    caches reflect the replay, no other thread may read."""
    with (
        cenotaph.open(tmp_path, auto_purge="off") as crashed,
        cenotaph.open(tmp_path, auto_purge="off") as store,
    ):
        store.write(SCOPE, "k", "secret")
        assert store.read(SCOPE, "k") is not None  # cached
        _crash_after_ledger(monkeypatch)
        with pytest.raises(RuntimeError):
            crashed.forget(SCOPE, "k", mode="compliance")
        gate = _Gate()
        real_sync, real_seen = store._caches.sync, store._ledger._seen

        def sync() -> None:
            if not gate.acting():  # the writer meets the entry inside its transaction
                real_sync()

        def seen(mark: int, *, replayed: bool) -> None:
            gate.pause()
            real_seen(mark, replayed=replayed)

        monkeypatch.setattr(store._caches, "sync", sync)
        monkeypatch.setattr(store._ledger, "_seen", seen)
        gate.reads_miss_while_held(store, lambda: store.write(SCOPE, "other", 1), "k")


def test_a_callback_that_writes_inside_a_transaction_gets_a_clear_error(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path) as store:
        store.write_many([{"scope": SCOPE, "key": f"k{i}", "value": i} for i in range(1000)])

        def progress(_done: int, _total: int) -> None:
            store.write(SCOPE, "from-callback", 1)

        with pytest.raises(cenotaph.StorageError, match="inside a transaction"):
            store.rotate_keys(progress=progress)
        assert store.read(SCOPE, "from-callback") is None
        assert present(store.read(SCOPE, "k1")).value == 1
        store.rotate_keys()  # the store is usable afterwards


def test_a_cache_hit_reads_data_version_once_and_no_ledger_file_while_nobody_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hot read: a dict lookup, ``data_version`` and the ledger hint in memory, no ``stat``."""
    with cenotaph.open(tmp_path) as store, cenotaph.open(tmp_path) as other:
        store.write(SCOPE, "k", "v")
        assert present(store.read(SCOPE, "k")).value == "v"  # resolved and cached
        assert present(store.read(SCOPE, "k")).value == "v"  # the sync after our own commit
        statements: list[str] = []
        store._backend.inner._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
        marks = {"n": 0}
        real_mark = store._provider.ledger_mark

        def counted() -> int:
            marks["n"] += 1
            return real_mark()

        monkeypatch.setattr(store._provider, "ledger_mark", counted)
        for _ in range(5):
            assert present(store.read(SCOPE, "k")).value == "v"
        assert statements == ["PRAGMA data_version"] * 5 and marks["n"] == 0
        other.forget(SCOPE, "k", mode="operational")  # a commit elsewhere: the full check again
        assert store.read(SCOPE, "k") is None
        assert statements and marks["n"] > 0


def test_a_forget_logged_by_a_process_that_died_before_its_commit_applies_at_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger entry with no commit behind it is a forget still under way: the next write (here
    another store's, on an unrelated key) replays it, and its commit reaches every reader's cache."""
    with (
        cenotaph.open(tmp_path) as crashed,
        cenotaph.open(tmp_path) as reader,
        cenotaph.open(tmp_path) as writer,
    ):
        crashed.write(SCOPE, "k", "secret")
        assert present(reader.read(SCOPE, "k")).value == "secret"  # cached
        _crash_after_ledger(monkeypatch)
        with pytest.raises(RuntimeError):
            crashed.forget(SCOPE, "k", mode="operational")  # in the ledger, not in the database
        writer.write(SCOPE, "unrelated", 1)
        assert reader.read(SCOPE, "k") is None
        assert writer.read(SCOPE, "k") is None


def test_a_cached_read_after_a_write_that_replayed_a_logged_forget_and_rolled_back_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that meets another process's logged forget, replays it and is then refused by it
    rolls back (nothing committed, so nothing tells the caches): this store's own next read must
    still not answer from the cache."""
    with cenotaph.open(tmp_path) as crashed, cenotaph.open(tmp_path) as store:
        store.write(SCOPE, "k", "secret")
        assert present(store.read(SCOPE, "k")).value == "secret"  # cached
        _crash_after_ledger(monkeypatch)
        with pytest.raises(RuntimeError):
            crashed.forget(SCOPE, "k", mode="operational")  # in the ledger, not in the database
        with pytest.raises(cenotaph.ForgottenError):
            store.write(SCOPE, "k", "again")  # replays the forget, is refused by it, rolls back
        assert store.read(SCOPE, "k") is None


def test_a_cache_miss_while_nobody_commits_is_one_statement_in_no_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold read whose keys are in memory is the one SELECT that brings its rows and the
    snapshot's ``data_version``: no ``BEGIN``/``COMMIT``, no ``stat`` of the ledger. A read that
    needs more (its scope's keys after reopening), or that follows another connection's commit or
    forget, takes a snapshot of its own and sees it."""
    with cenotaph.open(tmp_path) as store:
        store.write_many([{"scope": SCOPE, "key": f"k{i}", "value": i} for i in range(10)])
    with cenotaph.open(tmp_path) as store, cenotaph.open(tmp_path) as other:
        statements: list[str] = []
        store._backend.inner._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
        assert present(store.read(SCOPE, "k0")).value == 0  # the scope's keys are not in memory yet
        assert "BEGIN" in statements  # ... so it read again in a snapshot of its own
        marks = {"n": 0}
        real_mark = store._provider.ledger_mark

        def counted() -> int:
            marks["n"] += 1
            return real_mark()

        monkeypatch.setattr(store._provider, "ledger_mark", counted)
        statements.clear()
        for i in range(1, 6):
            assert present(store.read(SCOPE, f"k{i}")).value == i
        # SQLite traces what runs inside a statement ("-- PRAGMA data_version" of the
        # pragma_data_version the SELECT joins) as lines of its own, beginning with "--"
        top = [s for s in statements if not s.startswith("--")]
        assert len(top) == 5 and all(s.startswith("SELECT") for s in top), top
        assert marks["n"] == 0
        other.forget(SCOPE, "k6")  # in the ledger and committed elsewhere: the full path
        assert store.read(SCOPE, "k6") is None
        other.write(SCOPE, "k7", "new")  # a commit elsewhere, the ledger unchanged
        assert present(store.read(SCOPE, "k7")).value == "new"
        statements.clear()
        assert present(store.read(SCOPE, "k8")).value == 8  # quiet again: one statement
        assert len([s for s in statements if not s.startswith("--")]) == 1, statements
