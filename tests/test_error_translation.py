"""Driver errors become cenotaph's by SQLite's result code, never by their text.

Every error here is raised by real SQLite on a real file: a second connection holding the lock, a
file of garbage, a damaged page, a read-only file, a database at its page limit, a constraint.
The attack on message matching: errors whose text says "locked" (SQLite's own busy message, even)
but whose code is a constraint are not translated as a lock.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import cenotaph
from cenotaph.backends.sqlite.errors import is_busy, primary_code, translate
from cenotaph.errors import StorageError

USER = "tenant:acme/user:alice"
NOBODY = 65534
BUSY = "locked by another process"


def _raised(action: Callable[[], object]) -> sqlite3.Error:
    with pytest.raises(sqlite3.Error) as caught:
        action()
    return caught.value


@contextlib.contextmanager
def _database(path: Path, timeout: float = 5.0) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path, isolation_level=None, timeout=timeout)
    try:
        yield conn
    finally:
        conn.close()


def _with_rows(path: Path, rows: int = 2000) -> None:
    with _database(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("CREATE INDEX t_body ON t (body)")
        conn.executemany("INSERT INTO t (body) VALUES (?)", ((f"row {i:06d}" * 8,) for i in range(rows)))


# -- one real error per class, each from real SQLite --------------------------------------
def busy(tmp_path: Path) -> sqlite3.Error:
    db = tmp_path / "busy.db"
    with _database(db) as holder, _database(db, timeout=0) as waiter:
        holder.execute("BEGIN EXCLUSIVE")
        return _raised(lambda: waiter.execute("BEGIN IMMEDIATE"))


def locked(tmp_path: Path) -> sqlite3.Error:
    db = tmp_path / "locked.db"
    _with_rows(db, rows=10)
    with _database(db) as conn:
        reading = conn.execute("SELECT id FROM t")
        reading.fetchone()  # a statement still reading the table
        return _raised(lambda: conn.execute("DROP TABLE t"))


def not_a_database(tmp_path: Path) -> sqlite3.Error:
    db = tmp_path / "garbage.db"
    db.write_bytes(os.urandom(16384))
    with _database(db) as conn:
        return _raised(lambda: conn.execute("SELECT count(*) FROM sqlite_master"))


def damaged_page(tmp_path: Path) -> sqlite3.Error:
    db = tmp_path / "damaged.db"
    _with_rows(db)
    with _database(db) as conn:
        page = int(conn.execute("PRAGMA page_size").fetchone()[0])
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    with open(db, "r+b") as raw:  # every page but the header's: b-tree pages of garbage
        for number in range(1, pages):
            raw.seek(number * page)
            raw.write(b"\xa5" * page)
    with _database(db) as conn:
        return _raised(lambda: conn.execute("SELECT count(*), max(body) FROM t").fetchall())


def read_only(tmp_path: Path) -> sqlite3.Error:
    db = tmp_path / "ro.db"
    _with_rows(db, rows=1)
    with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
        return _raised(lambda: conn.execute("INSERT INTO t (body) VALUES ('x')"))


def cannot_open(tmp_path: Path) -> sqlite3.Error:
    return _raised(lambda: sqlite3.connect(tmp_path / "no such directory" / "x.db"))


def full(tmp_path: Path) -> sqlite3.Error:
    db = tmp_path / "full.db"
    _with_rows(db, rows=1)
    with _database(db) as conn:
        conn.execute("PRAGMA max_page_count=4")  # the database may not grow past four pages
        return _raised(lambda: conn.execute("INSERT INTO t (body) VALUES (?)", ("x" * 100_000,)))


def unique_on_locked(tmp_path: Path) -> sqlite3.Error:
    db = tmp_path / "unique.db"
    with _database(db) as conn:
        conn.execute("CREATE TABLE locked (name TEXT UNIQUE)")
        conn.execute("INSERT INTO locked VALUES ('the database is locked')")
        return _raised(lambda: conn.execute("INSERT INTO locked VALUES ('the database is locked')"))


def trigger_says_locked(tmp_path: Path) -> sqlite3.Error:
    db = tmp_path / "trigger.db"
    with _database(db) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.execute(
            "CREATE TRIGGER t_refuses BEFORE INSERT ON t BEGIN SELECT RAISE(ABORT, 'database is locked'); END"
        )
        return _raised(lambda: conn.execute("INSERT INTO t VALUES (1)"))


CASES: dict[str, tuple[Callable[[Path], sqlite3.Error], int, str]] = {
    "busy": (busy, sqlite3.SQLITE_BUSY, BUSY),
    "locked": (locked, sqlite3.SQLITE_LOCKED, BUSY),
    "notadb": (not_a_database, sqlite3.SQLITE_NOTADB, "is corrupt; restore it from a backup"),
    "corrupt": (damaged_page, sqlite3.SQLITE_CORRUPT, "is corrupt; restore it from a backup"),
    "readonly": (read_only, sqlite3.SQLITE_READONLY, "read-only for this user"),
    "cantopen": (cannot_open, sqlite3.SQLITE_CANTOPEN, "cannot open"),
    "full": (full, sqlite3.SQLITE_FULL, "free disk space"),
    "unique": (unique_on_locked, sqlite3.SQLITE_CONSTRAINT, "breaks one of its constraints"),
    "trigger": (trigger_says_locked, sqlite3.SQLITE_CONSTRAINT, "breaks one of its constraints"),
}


@pytest.mark.parametrize("name", CASES)
def test_each_class_of_real_error_gets_its_message(name: str, tmp_path: Path) -> None:
    produce, code, expected = CASES[name]
    exc = produce(tmp_path)
    assert primary_code(exc) == code, (exc.sqlite_errorname, str(exc))
    error = translate(exc, tmp_path / "cenotaph.db")
    assert isinstance(error, StorageError)
    assert expected in str(error), str(error)
    assert is_busy(exc) == (expected == BUSY)


def test_the_messages_name_the_database_and_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "cenotaph.db"
    for produce in (read_only, cannot_open, full):
        (tmp_path / produce.__name__).mkdir()
        message = str(translate(produce(tmp_path / produce.__name__), path))
        assert str(path) in message, message
    assert "the disk holding the database is full" in str(translate(full(tmp_path)))  # no path known
    assert "(SQLITE_CONSTRAINT_UNIQUE)" in str(translate(unique_on_locked(tmp_path)))


@pytest.mark.parametrize("produce", [unique_on_locked, trigger_says_locked], ids=["unique", "trigger"])
def test_a_constraint_whose_text_says_locked_is_not_a_lock(
    produce: Callable[[Path], sqlite3.Error], tmp_path: Path
) -> None:
    exc = produce(tmp_path)
    assert "locked" in str(exc).lower()  # what matching the text would have called a lock
    assert isinstance(exc, sqlite3.IntegrityError)
    assert not is_busy(exc)
    assert BUSY not in str(translate(exc))


def test_an_error_the_driver_raises_without_a_code_gets_the_generic_message(tmp_path: Path) -> None:
    with _database(tmp_path / "closed.db") as conn:
        pass
    closed = _raised(lambda: conn.execute("SELECT 1"))  # raised by sqlite3's own Python code
    assert getattr(closed, "sqlite_errorcode", None) is None
    assert primary_code(closed) is None
    assert "the database failed (ProgrammingError)" in str(translate(closed))
    # the sqlite3 module raises such errors with any text, "locked" included: without a code
    # there is nothing to classify, and the text is not read
    codeless = sqlite3.OperationalError("database is locked")
    assert not is_busy(codeless)
    assert str(translate(codeless)) == (
        "the database failed (OperationalError); check disk space and permissions"
    )


def test_an_unclassified_code_is_named_in_the_generic_message(tmp_path: Path) -> None:
    with _database(tmp_path / "syntax.db") as conn:
        exc = _raised(lambda: conn.execute("SELEKT 1"))
    assert primary_code(exc) == sqlite3.SQLITE_ERROR
    assert str(translate(exc)) == (
        "the database failed (OperationalError, SQLITE_ERROR); check disk space and permissions"
    )


def _as_nobody(action: Callable[[], tuple[int | None, str]]) -> tuple[int | None, str]:
    """Run ``action`` in a child that is a user file modes apply to (root ignores them)."""
    if os.geteuid() != 0:
        return action()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root for good, run, send the outcome back, never return
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            outcome: object = action()
        except BaseException as exc:  # sent to the parent, which fails the test
            outcome = f"{type(exc).__name__}: {exc}"
        with os.fdopen(write_end, "wb") as out:
            pickle.dump(outcome, out)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as incoming:
        outcome = pickle.load(incoming)  # our own child's
    os.waitpid(pid, 0)
    assert isinstance(outcome, tuple), outcome
    return outcome


def test_a_chmod_read_only_file_is_reported_read_only() -> None:
    directory = Path(tempfile.mkdtemp(prefix="cenotaph-ro-"))  # outside root's 0700 tmp_path
    try:
        db = directory / "cenotaph.db"
        _with_rows(db, rows=1)
        db.chmod(0o444)
        directory.chmod(0o555)

        def write() -> tuple[int | None, str]:
            with _database(db) as conn:
                exc = _raised(lambda: conn.execute("INSERT INTO t (body) VALUES ('x')"))
            return primary_code(exc), str(translate(exc, db))

        code, message = _as_nobody(write)
        assert code == sqlite3.SQLITE_READONLY
        assert message.startswith(f"read-only for this user: {directory}"), message
    finally:
        directory.chmod(0o700)
        shutil.rmtree(directory)


# -- through the store ---------------------------------------------------------------------
def test_a_store_on_a_file_of_garbage_says_corrupt(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "cenotaph.db").write_bytes(os.urandom(16384))
    keyring = cenotaph.LocalKeyring(tmp_path / "keyring")
    with pytest.raises(StorageError, match="the database file is corrupt; restore it from a backup"):
        cenotaph.open(data, key_provider=keyring)


def test_a_store_whose_table_refuses_with_a_locked_message_is_not_reported_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trigger added to the database (an altered file) refuses every record insert with
    SQLite's own busy text; the store reports the constraint, not a lock to wait out."""
    monkeypatch.setenv("CENOTAPH_BUSY_TIMEOUT_MS", "20000")
    data = tmp_path / "data"
    with cenotaph.open(data, auto_purge="off") as store:
        store.write(USER, "before", 1)
    with _database(data / "cenotaph.db") as conn:
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON records BEGIN SELECT RAISE(ABORT, 'database is locked'); END"
        )
    with cenotaph.open(data, auto_purge="off") as store:
        started = time.monotonic()
        with pytest.raises(StorageError) as caught:
            store.write(USER, "after", 2)
        assert time.monotonic() - started < 10  # refused at once, not retried as a lock
        assert "breaks one of its constraints" in str(caught.value)
        assert BUSY not in str(caught.value)
        assert store.read(USER, "after") is None
