"""S3/W5: an open reader anywhere blocks ``wal_checkpoint(TRUNCATE)``, and then nothing claims erasure.

A child process holds a read transaction on the database (a plain sqlite3 connection, as another
tool or a stuck process would). The compliance forget still returns (shredded: keys destroyed,
rows deleted) but its ``wal`` layer stays pending, so it is not ``verified``, and
``confirm_erasure`` and ``attest`` refuse, naming the wal layer. Once the reader is gone,
``purge()`` truncates the WAL, scans, and the request verifies and attests.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.erasure._erasure_data import DB, A, B, Written, assert_gone, assert_readable, cells, populate
from tests.kit.oracle import residue
from tests.kit.proc import Child

import cenotaph
from cenotaph.errors import ErasureNotProvableError

# about SQLite's files and rows (tests/kit/stores.py)
pytestmark = pytest.mark.sqlite_only


class Reader:
    """A child process holding ``BEGIN; SELECT count(*) FROM records;`` open (``hold-reader``)."""

    def __init__(self, db: Path) -> None:
        self.child = Child("hold-reader", {"db": str(db)}, keep_stdin=True)
        line = self.child.readline()
        assert line.startswith("holding "), self.child.stderr or line
        self.count = int(line.split()[1])

    def release(self) -> None:
        """Close its stdin: it commits, says so and exits."""
        assert self.child.finish(timeout=30) == 0, self.child.stderr
        assert "released" in self.child.lines

    def kill(self) -> None:
        """SIGKILL it if it still holds, and reap it (idempotent)."""
        self.child.close()


def _wal_gaps(gaps: list[str] | tuple[str, ...]) -> list[str]:
    return [g for g in gaps if "wal" in g.lower()]


FORGET_DEADLINE = 8.0  # seconds; a forget with a held reader should take about one purge (< 1 s)


def _forget_with_deadline(store: cenotaph.Store, reader: Reader) -> cenotaph.ErasureRequest:
    """``forget_subject(A)`` in a thread; if it is still blocked after FORGET_DEADLINE, release the
    reader (so the thread can finish) and fail."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["request"] = store.forget_subject(A)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(FORGET_DEADLINE)
    if thread.is_alive():
        reader.release()
        thread.join(120)
        pytest.fail(
            f"forget_subject blocked for more than {FORGET_DEADLINE}s while a reader held the WAL "
            f"(returned {time.monotonic() - started:.1f}s after the reader was released); it should "
            "return with the wal layer pending"
        )
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["request"]  # type: ignore[return-value]


@dataclass
class Held:
    """A store with subjects A and B, and a child process holding a read snapshot on it."""

    store: cenotaph.Store
    reader: Reader
    a: Written
    b: Written
    a_cells: list[bytes]
    before: object = None  # what the ``before`` step returned


@contextlib.contextmanager
def _held_reader(
    data: Path, *, auto_purge: str, before: Callable[[cenotaph.Store], object] | None = None
) -> Iterator[Held]:
    """Populate, run ``before`` (its result is ``Held.before``), start the reader, then write once
    more (WAL frames after its snapshot). The reader is killed (if still holding) and the store
    closed whatever the test does."""
    store = cenotaph.open(data, auto_purge=auto_purge)
    reader: Reader | None = None
    try:
        a = populate(store, A, "A", short=6, long=1)
        b = populate(store, B, "B", short=6, long=1)
        a_cells = cells(data / DB, a.ids)
        prepared = None if before is None else before(store)
        reader = Reader(data / DB)
        assert reader.count == len(store.list("tenant:t", include_descendants=True))
        store.write("tenant:t/user:c", "k", "other data")
        yield Held(store, reader, a, b, a_cells, prepared)
    finally:
        if reader is not None:
            reader.kill()
        store.close()


def _refused_for_the_wal(store: cenotaph.Store, request: cenotaph.ErasureRequest) -> None:
    """Neither confirm_erasure nor attest claims erasure while the wal layer is pending."""
    with pytest.raises(ErasureNotProvableError) as confirm:
        store.confirm_erasure(request.id)
    assert _wal_gaps(confirm.value.gaps), confirm.value.gaps
    assert "wal" in str(confirm.value).lower()
    with pytest.raises(ErasureNotProvableError) as attest:
        store.attest(request.id)
    assert _wal_gaps(attest.value.gaps), attest.value.gaps


def test_a_held_reader_leaves_the_wal_layer_pending_and_forget_returns(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with _held_reader(data, auto_purge="sync") as held:
        store = held.store
        request = _forget_with_deadline(store, held.reader)  # auto-purge runs, cannot truncate the WAL
        status = request.status()
        assert status.state == "shredded", "keys destroyed; purge could not complete every layer"
        assert status.layers["wal"].state == "pending"
        assert status.layers["wal"].evidence["wal_bytes"] > 0
        assert status.layers["keys"].state == "done"
        assert status.layers["rows"].state == "done"
        assert status.layers["scan"].state == "pending"
        assert _wal_gaps(status.gaps), status.gaps
        assert_gone(store, held.a)  # already shredded: nothing of a is readable meanwhile
        assert_readable(store, held.b)
        _refused_for_the_wal(store, request)

        # purging and waiting do not get past a reader either
        report = store.purge()
        assert report.wal_truncated is False
        assert report.requests[request.id] == "shredded"
        assert request.wait(timeout=0.5).state == "shredded"

        held.reader.release()
        _verified_after_release(store, request, data, held.a, held.a_cells, held.b)


def test_a_reader_held_across_the_forget_keeps_it_unprovable_until_it_is_gone(tmp_path: Path) -> None:
    """The same without auto-purge (so the forget does not checkpoint): gaps name the wal layer until
    the reader is gone and ``purge()`` has run."""
    data = tmp_path / "data"
    with _held_reader(data, auto_purge="off") as held:
        store = held.store
        request = store.forget_subject(A)
        status = request.status()
        assert status.state == "shredded"
        assert status.layers["wal"].state == "pending"
        assert _wal_gaps(status.gaps), status.gaps
        assert_gone(store, held.a)
        _refused_for_the_wal(store, request)

        held.reader.release()
        _verified_after_release(store, request, data, held.a, held.a_cells, held.b)


def _verified_after_release(
    store: cenotaph.Store,
    request: cenotaph.ErasureRequest,
    data: Path,
    a: Written,
    a_cells: list[bytes],
    b: Written,
) -> None:
    report = store.purge()
    assert report.wal_truncated is True
    assert report.requests[request.id] == "verified"
    assert report.scan["matches"] == 0 and report.scan["probes"] > 0
    assert report.scan["positive_control"] is True
    status = store.confirm_erasure(request.id)
    assert status.state == "verified"
    assert status.layers["wal"].state == "done"
    assert status.layers["wal"].evidence["wal_bytes"] == 0
    certificate = store.attest(request.id)
    cenotaph.verify_certificate(certificate.to_json(), store.public_key)
    assert certificate["layers"]["wal"]["state"] == "done"
    clean = residue(data, texts=[a.canary], blobs=a_cells)
    assert clean["text_hits"] == [] and clean["window_hits"] == []
    assert_readable(store, b)


def test_a_purged_request_is_not_verified_while_a_reader_blocks_the_wal(tmp_path: Path) -> None:
    """A purge cut short during its scan (here its progress callback raises) leaves the request
    purged. If a reader then blocks the next purge's WAL truncation, that purge must not verify
    it: the certificate would be signed over a pending layer."""
    data = tmp_path / "data"

    def forget_then_cut_the_purge_short(store: cenotaph.Store) -> cenotaph.ErasureRequest:
        request = store.forget_subject(A)

        def cancel(done: int, total: int) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            store.purge(progress=cancel)
        assert request.status().state == "purged"
        return request

    with _held_reader(data, auto_purge="off", before=forget_then_cut_the_purge_short) as held:
        store, request = held.store, held.before
        assert isinstance(request, cenotaph.ErasureRequest)
        report = store.purge()
        assert report.wal_truncated is False
        assert report.requests[request.id] == "purged"
        _refused_for_the_wal(store, request)

        held.reader.release()
        _verified_after_release(store, request, data, held.a, held.a_cells, held.b)
