"""Writers of different targets run at once on PostgreSQL; a forget waits for the writes it could
dominate. Shown with one write transaction held open (stopped inside it, after its locks) while
other stores of the same schema -- other app servers -- write and forget: what must proceed
commits while it is open, what must wait is seen waiting on its advisory lock in ``pg_locks``.
No timing is asserted: a write that waited would keep the test waiting for the held one, which
is released only after the others returned."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

import cenotaph
from cenotaph.erasure.planning.planner import Survey
from cenotaph.errors import ErasureNotProvableError, ForgottenError

from ._scenarios import open_store

ALICE = "tenant:locks/user:alice"
BOB = "tenant:locks/user:bob"
WAIT_S = 60


class Held:
    """A store's next write, stopped inside its transaction (locks taken, rows written) until
    :meth:`release`."""

    def __init__(self, store: cenotaph.Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inside = threading.Event()
        self._release = threading.Event()
        original: Callable[..., Any] = store._batches.write

        def write(txn: Any, group: Sequence[Any], clock: int, view: Any) -> Any:
            result = original(txn, group, clock, view)
            self.inside.set()
            self._release.wait(WAIT_S)
            return result

        monkeypatch.setattr(store._batches, "write", write)

    def release(self) -> None:
        self._release.set()


class Background:
    """A call on a thread of its own, and what it returned or raised."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.result = call()
        except BaseException as exc:  # reported by the test, on its thread
            self.error = exc

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self) -> Any:
        self._thread.join(WAIT_S)
        assert self.done, "the call did not return"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def stores(pg_dsn: str, pg_schema: str, tmp_path: Path) -> Iterator[list[cenotaph.Store]]:
    keyring = str(tmp_path / "keyring")
    opened = [open_store(pg_dsn, pg_schema, keyring) for _ in range(3)]
    try:
        yield opened
    finally:
        for store in opened:
            store.close()


def _waiting_on_advisory_locks(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()
    return 0 if row is None else int(row[0])


def _until_waiting(dsn: str, call: Background) -> None:
    deadline = time.monotonic() + WAIT_S
    while _waiting_on_advisory_locks(dsn) == 0:
        assert not call.done, "it did not wait for the held write"
        assert time.monotonic() < deadline, "nothing waits on an advisory lock"
        time.sleep(0.01)


def test_writes_of_other_users_commit_while_one_is_open(
    stores: list[cenotaph.Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    held_store, other, reader = stores
    for store in stores:  # keys made, ledgers read: nothing store-wide left to do
        store.write(ALICE, "warm", 1)
        store.write(BOB, "warm", 1)
    held = Held(held_store, monkeypatch)
    alice = Background(lambda: held_store.write(ALICE, "diet", "vegan"))
    assert held.inside.wait(WAIT_S)
    try:
        bob = other.write(BOB, "diet", "omnivore")  # another user: its locks are free
        drink = other.write(ALICE, "drink", "tea")  # alice, another key: shared locks only
        assert not alice.done
        seen_bob, seen_drink = reader.read(BOB, "diet"), reader.read(ALICE, "drink")
        assert seen_bob is not None and seen_bob.version == bob.version  # committed meanwhile
        assert seen_drink is not None and seen_drink.version == drink.version
        assert reader.read(ALICE, "diet") is None  # the held one has not
    finally:
        held.release()
    written = alice.join()
    # versions are blocks of one sequence: the held write took its block first, committed last
    assert written.version < bob.version


def test_a_forget_waits_for_the_writes_it_could_dominate(
    stores: list[cenotaph.Store], monkeypatch: pytest.MonkeyPatch, pg_dsn: str
) -> None:
    held_store, other, reader = stores
    for store in stores:
        store.write(ALICE, "warm", 1)
    held = Held(held_store, monkeypatch)
    alice = Background(lambda: held_store.write(f"{ALICE}/session:s1", "diet", "vegan"))
    assert held.inside.wait(WAIT_S)
    try:
        # a key forget of alice's subtree covers the held write: it waits on the target's lock
        forget = Background(lambda: other.forget(ALICE, "diet"))
        _until_waiting(pg_dsn, forget)
        # and so does another write of the held write's slot (one write of a slot at a time)
        same_slot = Background(lambda: reader.write(f"{ALICE}/session:s1", "diet", "vegetarian"))
        deadline = time.monotonic() + WAIT_S
        while _waiting_on_advisory_locks(pg_dsn) < 2:
            assert not same_slot.done and time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        held.release()
    written = alice.join()
    request = forget.join()
    assert written.version < request.version  # it landed before the forget, and is in its plan
    try:
        late = same_slot.join()
    except ForgottenError as exc:  # it waited behind the forget too
        assert exc.version == request.version
    else:  # it committed between the held write and the forget: forgotten with them
        assert late.version < request.version
    for store in stores:
        assert store.read(f"{ALICE}/session:s1", "diet", fallthrough=False) is None


def test_a_record_that_escapes_the_survey_is_caught_by_the_postcondition(
    stores: list[cenotaph.Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under target locks versions commit out of order, so a survey can miss a record written
    before the forget (the model's -DNO_SWEEP). Simulated: the first survey sees nothing and
    notes a clock above the record's version. The postcondition finds the record, the forget
    rolls back and surveys again, and the record is forgotten with it."""
    store = stores[0]
    written = store.write(ALICE, "diet", "vegan")
    planner = store._erasure._planner
    original = planner.survey
    surveys: list[int] = []

    def survey(reading: Any, target: Any) -> Survey:
        surveys.append(1)
        if len(surveys) == 1:  # missed: its version is below the clock this survey notes
            return Survey(since=written.version + 1)
        return original(reading, target)

    monkeypatch.setattr(planner, "survey", survey)
    request = store.forget(ALICE, "diet")
    assert len(surveys) == 2
    assert request.version > written.version
    assert store.read(ALICE, "diet") is None
    assert written.id in store._erasure.row(request.id).plan


def test_a_survey_that_keeps_missing_fails_the_forget_closed(
    stores: list[cenotaph.Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores[0]
    written = store.write(ALICE, "diet", "vegan")
    planner = store._erasure._planner
    monkeypatch.setattr(planner, "survey", lambda reading, target: Survey(since=written.version + 1))
    with pytest.raises(ErasureNotProvableError, match="postcondition"):
        store.forget(ALICE, "diet")
    found = store.read(ALICE, "diet")
    assert found is not None and found.version == written.version  # nothing was changed
