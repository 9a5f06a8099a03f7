"""Group commit: concurrent writes of one store share one transaction, each refused on its own.

A real group is made to form: the first writer's commit is held until every other writer has
queued behind it (counted by the queue itself), so the next group holds them all, in the order
they queued; the queue's own counter then shows the group's size. A SIGKILL in the middle of a
stream of grouped writes loses only writes whose return was never seen.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from tests.kit.checks import present
from tests.kit.proc import spawn

import cenotaph
from cenotaph.errors import (
    DerivedFromForgottenError,
    ForgottenError,
    InvalidValueError,
    StaleWriteError,
    StorageError,
)
from cenotaph.writes.group_commit import GroupCommit

SCOPE = "tenant:acme/user:alice/session:s1"


class Held:
    """Holds the store's first group commit until ``expected`` writes are queued (the held one
    included), then lets it go: every write queued meanwhile forms the next group."""

    def __init__(self, store: cenotaph.Store) -> None:
        self.store = store
        self.queue = store._group
        self.real: Callable[[Sequence[Any]], Sequence[Any]] = self.queue._commit
        self.entered = threading.Event()
        self.go = threading.Event()
        self.queue._commit = self._commit

    def _commit(self, works: Sequence[Any]) -> Sequence[Any]:
        if not self.entered.is_set():
            self.entered.set()
            assert self.go.wait(30), "the held group was never released"
        return self.real(works)

    def wait_queued(self, count: int) -> None:
        deadline = time.monotonic() + 30
        while self.queue.queued() < count:
            assert time.monotonic() < deadline, f"only {self.queue.queued()} of {count} writes queued"
            time.sleep(0.001)


def _run(results: dict[str, Any], name: str, call: Callable[[], Any]) -> threading.Thread:
    def target() -> None:
        try:
            results[name] = call()
        except BaseException as exc:
            results[name] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread


@contextlib.contextmanager
def one_group(store: cenotaph.Store, calls: list[tuple[str, Callable[[], Any]]]) -> Iterator[dict[str, Any]]:
    """Queue ``calls`` in this order behind a held write, then release them as one group."""
    held = Held(store)
    results: dict[str, Any] = {}
    threads = [_run(results, "held", lambda: store.write(SCOPE, "held", 0))]
    assert held.entered.wait(30)
    for number, (name, call) in enumerate(calls, start=2):
        threads.append(_run(results, name, call))
        held.wait_queued(number)  # one at a time: the queue's order is the list's
    groups_before = held.queue.groups
    yield results
    held.go.set()
    for thread in threads:
        thread.join(30)
        assert not thread.is_alive()
    assert held.queue.groups == groups_before + 2  # the held write's group, then all of these
    assert held.queue.largest == len(calls), "the queued writes did not commit as one group"


def test_a_refused_write_in_a_group_does_not_fail_the_others(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path, auto_purge="off") as store:
        current = store.write(SCOPE, "current", "v1")
        store.write(SCOPE, "gone", "old")
        store.forget(SCOPE, "gone", mode="operational")
        source = store.write(SCOPE, "source", "about bob")
        store.forget(SCOPE, "source", mode="operational")
        store.forget_subject("user:bob")

        def write(key: str, value: Any, **options: Any) -> Callable[[], Any]:
            return lambda: store.write(SCOPE, key, value, **options)

        calls = [
            ("a", write("a", 1)),
            ("tombstoned", write("gone", "again")),
            ("dup1", write("dup", "one")),
            ("stale", write("current", "v2", base_version=current.version - 1)),
            ("b", write("b", 2, base_version=None)),
            ("derived", write("summary", "from a forgotten source", derived_from=[source.id])),
            ("future", write("c", 3, base_version=10**9)),
            ("subject", write("about-bob", "x", subjects=["user:bob"])),
            (
                "batch-refused",
                lambda: store.write_many(
                    [{"scope": SCOPE, "key": "d", "value": 4}, {"scope": SCOPE, "key": "gone", "value": 5}]
                ),
            ),
            (
                "batch",
                lambda: store.write_many(
                    [{"scope": SCOPE, "key": "e", "value": 5}, {"scope": SCOPE, "key": "f", "value": 6}]
                ),
            ),
            ("dup2", write("dup", "two")),
            ("current", write("current", "v2", base_version=current.version)),
        ]
        with one_group(store, calls) as results:
            pass
        assert isinstance(results["tombstoned"], ForgottenError)
        assert isinstance(results["stale"], StaleWriteError)
        assert isinstance(results["derived"], DerivedFromForgottenError)
        assert isinstance(results["future"], InvalidValueError)
        assert isinstance(results["subject"], ForgottenError)
        assert isinstance(results["batch-refused"], ForgottenError)
        # the others landed, in queue order and version order
        landed = ["a", "dup1", "b", "batch", "dup2", "current"]
        for name in landed:
            assert not isinstance(results[name], BaseException), (name, results[name])
        versions = [
            r.version for name in landed for r in (results[name] if name == "batch" else [results[name]])
        ]
        assert versions == sorted(versions) and len(set(versions)) == len(versions)
        assert versions[0] > results["held"].version
        for key, value in (("a", 1), ("b", 2), ("e", 5), ("f", 6), ("dup", "two"), ("current", "v2")):
            record = store.read(SCOPE, key)
            assert record is not None and record.value == value, key
        assert present(store.read(SCOPE, "dup")).version == results["dup2"].version
        for key in ("gone", "summary", "c", "about-bob", "d"):
            assert store.read(SCOPE, key) is None, key
    with cenotaph.open(tmp_path) as reopened:  # what landed is durable, what was refused is not there
        assert present(reopened.read(SCOPE, "e")).value == 5
        assert present(reopened.read(SCOPE, "dup")).value == "two"
        assert reopened.read(SCOPE, "d") is None
        assert reopened.check_integrity() == []


def test_a_storage_failure_fails_every_write_of_the_group(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path) as store:
        real = store._batches.write

        def fail_groups(txn: Any, group: Sequence[Any], clock: int, view: Any) -> Any:
            outcome = real(txn, group, clock, view)  # every row written, then the transaction fails
            if len(group) > 1:
                raise StorageError("the database failed (simulated); check disk space and permissions")
            return outcome

        store._batches.write = fail_groups  # type: ignore[method-assign]
        calls: list[tuple[str, Callable[[], Any]]] = [
            (f"k{i}", partial(store.write, SCOPE, f"k{i}", i)) for i in range(6)
        ]
        with one_group(store, calls) as results:
            pass
        for name, _ in calls:
            assert isinstance(results[name], StorageError), name
            assert store.read(SCOPE, name) is None  # none acknowledged, none landed
        assert present(store.read(SCOPE, "held")).value == 0
        store._batches.write = real  # type: ignore[method-assign]
        assert store.write(SCOPE, "k0", "after").value == "after"  # keys and state were rolled back cleanly
    with cenotaph.open(tmp_path) as reopened:
        assert [r.key for r in reopened.list(SCOPE)] == ["held", "k0"]


def test_a_forget_that_commits_while_writes_are_queued_refuses_them(tmp_path: Path) -> None:
    """Tombstones win over a group: a forget committed before the group's transaction refuses
    the group's writes of the key, and only those."""
    with cenotaph.open(tmp_path) as store:
        store.write(SCOPE, "x", "before")
        calls = [
            ("x", lambda: store.write(SCOPE, "x", "after")),
            ("y", lambda: store.write(SCOPE, "y", "lands")),
            ("x-child", lambda: store.write(SCOPE + "/turn:t1", "x", "below")),
        ]
        with one_group(store, calls) as results:
            request = store.forget(SCOPE, "x")  # the held group has not begun its transaction
        assert isinstance(results["x"], ForgottenError) and results["x"].version == request.version
        assert isinstance(results["x-child"], ForgottenError)
        assert results["y"].version > request.version
        assert store.read(SCOPE, "x") is None
        assert present(store.read(SCOPE, "y")).value == "lands"


def test_sessions_and_lineage_work_through_a_group(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path, auto_purge="off") as store:
        store.write(SCOPE, "fact", "alice likes tea", subjects=["user:alice"])
        with store.session(SCOPE) as session:
            assert session.read(SCOPE, "fact") is not None
            calls = [
                ("derived", lambda: session.write(SCOPE, "summary", "tea person")),
                ("plain", lambda: store.write(SCOPE, "other", 1)),
            ]
            with one_group(store, calls) as results:
                pass
        derived = results["derived"]
        assert derived.derived_from and "user:alice" in derived.subjects
        store.forget_subject("user:alice")
        assert store.read(SCOPE, "summary") is None  # W6: the derived record went with its source
        assert present(store.read(SCOPE, "other")).value == 1


def test_a_writer_inside_a_transaction_still_gets_the_clear_error(tmp_path: Path) -> None:
    """A callback run under the write lock must not queue behind a leader that waits for that
    lock: it commits alone, and is refused at once as before."""
    with cenotaph.open(tmp_path) as store:
        store.write_many([{"scope": SCOPE, "key": f"k{i}", "value": i} for i in range(600)])
        errors: list[BaseException] = []

        def progress(_done: int, _total: int) -> None:
            try:
                store.write(SCOPE, "from-callback", 1)
            except StorageError as exc:
                errors.append(exc)

        store.rotate_keys(progress=progress)
        assert errors and all("inside a transaction" in str(e) for e in errors)
        assert store.write(SCOPE, "after", 1).value == 1


def test_many_threads_at_a_barrier_share_groups(tmp_path: Path) -> None:
    """16 threads released together, 25 writes each: every write lands once, with its own
    version, and groups of more than one write formed (the queue's counter)."""
    threads_n, per_thread = 16, 25
    with cenotaph.open(tmp_path) as store:
        barrier = threading.Barrier(threads_n)
        held = Held(store)
        returned: dict[str, int] = {}
        lock = threading.Lock()

        def writer(t: int) -> None:
            barrier.wait()
            for i in range(per_thread):
                record = store.write(SCOPE, f"t{t}-{i}", [t, i])
                with lock:
                    returned[record.key] = record.version

        pool = [threading.Thread(target=writer, args=(t,)) for t in range(threads_n)]
        for thread in pool:
            thread.start()
        assert held.entered.wait(30)
        held.wait_queued(threads_n)  # the first write is held; every other thread queued behind it
        held.go.set()
        for thread in pool:
            thread.join(60)
        assert len(returned) == threads_n * per_thread
        assert len(set(returned.values())) == len(returned)
        assert held.queue.largest >= threads_n - 1
        assert held.queue.groups < threads_n * per_thread
    with cenotaph.open(tmp_path) as reopened:
        for key, version in returned.items():
            record = reopened.read(SCOPE, key)
            assert record is not None and record.version == version


# -- SIGKILL mid-group --------------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_sigkill_mid_group_loses_only_unacknowledged_writes(tmp_path: Path) -> None:
    acked: dict[str, int] = {}
    largest = 0
    with spawn("group-writer", directory=str(tmp_path)) as child:
        child.wait_for("ready")
        while len(acked) < 600 or largest < 2:
            line = child.readline()
            assert line, child.stderr
            kind, *rest = line.split()
            if kind == "w":
                acked[rest[0]] = int(rest[1])
            elif kind == "g":
                largest = int(rest[0])
        seen = len(child.lines)
        child.kill()  # mid-stream: groups are being committed right now
        for line in child.lines[seen:]:
            if line.startswith("w "):  # printed before the kill: returned, so it must survive
                _, key, printed = line.split()
                acked[key] = int(printed)
    assert child.returncode == -signal.SIGKILL
    assert largest >= 2, "no group of more than one write formed before the kill"
    with cenotaph.open(tmp_path) as store:
        scope = "tenant:crash/user:u/session:s"
        for key, version in acked.items():
            record = store.read(scope, key)
            assert record is not None, f"an acknowledged write was lost ({key})"
            assert record.version == version and record.value == {"key": key, "text": key * 8}
        found = store.list(scope)
        for record in found:  # landed but never acknowledged: whole, never torn
            assert record.value == {"key": record.key, "text": record.key * 8}
        keys = {r.key for r in found}
        for key in keys:  # a write_many landed whole or not at all
            if key.startswith("b"):
                stem = key.rsplit("-", 1)[0]
                assert {f"{stem}-{j}" for j in range(3)} <= keys, stem
        assert len({r.version for r in found}) == len(found)
        assert store.check_integrity() == []


# -- the queue on its own ------------------------------------------------------------------------
class _Recorder:
    """A commit function that holds its first group until released and records every group."""

    def __init__(self) -> None:
        self.groups: list[list[int]] = []
        self.release = threading.Event()

    def __call__(self, works: Sequence[int]) -> list[int | BaseException]:
        if not self.groups:
            assert self.release.wait(30)
        self.groups.append(list(works))
        if any(w < 0 for w in works):
            raise StorageError("the database failed (simulated); check disk space and permissions")
        return [ValueError(f"refused {w}") if w % 2 else w * 10 for w in works]


def _queued(queue: GroupCommit[int, int], count: int) -> None:
    deadline = time.monotonic() + 30
    while queue.queued() < count:
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_the_queue_gives_each_caller_its_own_outcome_in_groups() -> None:
    recorder = _Recorder()
    queue: GroupCommit[int, int] = GroupCommit(recorder, max_records=5)
    results: dict[str, Any] = {}
    threads = [_run(results, "0", lambda: queue.submit(0))]
    _queued(queue, 1)
    sizes = {1: 1, 2: 1, 3: 2, 4: 1, 6: 3, 8: 1, 10: 1}  # work -> records; 6 with 3 more passes the bound
    for number, work in enumerate(sizes, start=2):
        threads.append(_run(results, str(work), partial(queue.submit, work, sizes[work], alone=work == 8)))
        _queued(queue, number)
    recorder.release.set()
    for thread in threads:
        thread.join(30)
    # the held group; then up to 5 records; a larger call starts the next; an alone call is alone
    assert recorder.groups == [[0], [1, 2, 3, 4], [6], [8], [10]]
    assert queue.groups == 5 and queue.largest == 4 and queue.queued() == 0
    for work in (0, 2, 4, 6, 8, 10):
        assert results[str(work)] == work * 10
    for work in (1, 3):
        assert isinstance(results[str(work)], ValueError) and str(results[str(work)]) == f"refused {work}"


def test_a_failed_commit_fails_every_caller_of_its_group_and_no_other() -> None:
    recorder = _Recorder()
    queue: GroupCommit[int, int] = GroupCommit(recorder)
    results: dict[str, Any] = {}
    threads = [_run(results, "held", lambda: queue.submit(2))]
    _queued(queue, 1)
    for number, work in enumerate((4, -1, 6), start=2):
        threads.append(_run(results, str(work), partial(queue.submit, work)))
        _queued(queue, number)
    recorder.release.set()
    for thread in threads:
        thread.join(30)
    assert results["held"] == 20
    assert all(isinstance(results[k], StorageError) for k in ("4", "-1", "6"))
    assert queue.submit(8) == 80  # the queue goes on


def test_an_interrupted_waiter_leaves_the_queue_and_the_others_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _Recorder()
    queue: GroupCommit[int, int] = GroupCommit(recorder)
    interrupted = threading.local()

    class Interrupting(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            if getattr(interrupted, "on", False):
                raise KeyboardInterrupt
            return super().wait(timeout)

    monkeypatch.setattr(threading, "Condition", Interrupting)  # groupcommit.threading is this module
    results: dict[str, Any] = {}
    threads = [_run(results, "held", lambda: queue.submit(0))]
    _queued(queue, 1)

    def interrupted_submit() -> int:
        interrupted.on = True
        return queue.submit(2)

    threads.append(_run(results, "interrupted", interrupted_submit))
    threads[-1].join(30)
    assert isinstance(results["interrupted"], KeyboardInterrupt)
    assert queue.queued() == 1  # it left; only the held leader is queued
    threads.append(_run(results, "after", lambda: queue.submit(4)))
    _queued(queue, 2)
    recorder.release.set()
    for thread in threads:
        thread.join(30)
    assert recorder.groups == [[0], [4]]  # the interrupted call was never committed
    assert results["after"] == 40
