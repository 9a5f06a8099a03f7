"""Compliance forgets return at ``shredded``; purge, WAL truncation and the verifying scan run in
the store's background worker, coalesced (one scan for many forgets). ``wait()`` reports as it
did; ``auto_purge`` chooses background (default), synchronous or none; a stray file holding
residue is named once and does not make later purges rescan with every probe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.kit.stores import StoreFactory, open_location

import cenotaph
from cenotaph.erasure.proof import scan_worker, verification
from cenotaph.errors import ErasureNotProvableError, InvalidValueError, StorageError

SCOPE = "tenant:acme/user:alice/session:s1"


class Scans:
    """Counts the verifying scans of this process; ``hold()`` makes the next one wait (checking
    its progress callback, as a long scan would) until ``release()``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[int] = []  # probes per scan
        self.started = threading.Event()
        self._gate = threading.Event()
        self._gate.set()
        self.failing: BaseException | None = None  # every scan raises it while set
        real = scan_worker.scan_in_child  # what verification.scan_in_child is

        def counted(
            roots: Any, probes: Any, progress: Callable[[int, int], None] | None = None, **kw: Any
        ) -> Any:
            self.calls.append(len(probes))
            self.started.set()
            while not self._gate.wait(0.01):
                if progress is not None:
                    progress(0, 1)  # a closing worker stops here
            if self.failing is not None:
                raise self.failing
            return real(roots, probes, progress, **kw)

        monkeypatch.setattr(verification, "scan_in_child", counted)

    def hold(self) -> None:
        self.started.clear()
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> Scans:
    return Scans(monkeypatch)


@pytest.fixture
def store(store_factory: StoreFactory) -> cenotaph.Store:
    """A default store: its worker purges in the background."""
    return store_factory(purge="background")


def _forget_some(store: cenotaph.Store, count: int, prefix: str = "k") -> list[cenotaph.ErasureRequest]:
    store.write_many(
        [{"scope": SCOPE, "key": f"{prefix}{i}", "value": f"note {prefix}{i} " * 8} for i in range(count)]
    )
    return [store.forget(SCOPE, f"{prefix}{i}") for i in range(count)]


def test_a_compliance_forget_returns_shredded_and_its_purge_follows_in_the_background(
    store: cenotaph.Store, scans: Scans
) -> None:
    assert store.purge_mode == "background" and store.auto_purge is True
    scans.hold()
    (request,) = _forget_some(store, 1)
    status = request.status()
    assert status.state == "shredded"  # tombstone and key destruction durable; no scan yet
    assert status.layers["keys"].state == "done" and status.layers["scan"].state == "pending"
    assert store.read(SCOPE, "k0") is None
    assert scans.started.wait(10), "the worker started purging without being asked"
    scans.release()
    assert request.wait(timeout=60).state == "verified"
    assert store.confirm_erasure(request.id).state == "verified"


def test_many_forgets_share_one_scan(store: cenotaph.Store, scans: Scans) -> None:
    """While the worker's first scan runs, 20 more forgets return; one more pass verifies them
    all with one scan (not one per request)."""
    scans.hold()
    (first,) = _forget_some(store, 1, "first")
    assert scans.started.wait(10)
    requests = _forget_some(store, 20)
    assert {r.status().state for r in requests} == {"shredded"}
    scans.release()
    for request in [first, *requests]:
        assert request.wait(timeout=60).state == "verified", request.status().gaps
    assert len(scans.calls) <= 3, scans.calls  # the held pass, the pass for the 20, maybe one idle
    assert max(scans.calls) >= 20, "one scan carried the probes of many requests"


def test_wait_with_a_timeout_returns_the_status_so_far(store: cenotaph.Store, scans: Scans) -> None:
    scans.hold()
    (request,) = _forget_some(store, 1)
    started = time.monotonic()
    status = request.wait(timeout=0.3)
    assert time.monotonic() - started < 5
    assert status.state in ("shredded", "purged")
    with pytest.raises(ErasureNotProvableError):
        store.confirm_erasure(request.id)
    scans.release()
    assert request.wait(timeout=60).state == "verified"


def test_a_failed_background_pass_reaches_the_waiter_and_the_next_pass_retries(
    store: cenotaph.Store, scans: Scans
) -> None:
    scans.failing = StorageError("the residue scan failed (test); check the data directory is readable")
    (request,) = _forget_some(store, 1)
    with pytest.raises(StorageError, match="residue scan failed"):
        request.wait(timeout=60)
    assert request.status().state == "purged"  # the rows went; the scan is what failed
    scans.failing = None
    assert request.wait(timeout=60).state == "verified"


def test_close_stops_a_background_scan_and_the_next_open_finishes_it(
    store_factory: StoreFactory, scans: Scans
) -> None:
    store = store_factory(purge="background")
    scans.hold()
    (request,) = _forget_some(store, 1)
    assert scans.started.wait(10)
    started = time.monotonic()
    store.close(purge_timeout=0.5)  # the held scan outlasts the last pass's time; at its next
    assert time.monotonic() - started < 5  # progress callback the worker stops
    scans.release()
    again = store_factory.reopen(store)
    assert again.erasure(request.id).wait(timeout=60).state == "verified"


@pytest.mark.parametrize("mode", ["sync", "off"])
def test_auto_purge_chooses_when_the_purge_runs(store_factory: StoreFactory, mode: str) -> None:
    store = store_factory(purge=mode)
    assert store.purge_mode == mode and store.auto_purge is (mode != "off")
    (request,) = _forget_some(store, 1)
    if mode == "sync":
        assert request.status().state == "verified"
    else:
        # a pass of the worker that starts after the forget has ended: in "off" mode it leaves
        # the request where the forget left it
        assert store._erasure.worker.wait_until_ended(store._erasure.worker.nudge(), timeout=60)
        assert request.status().state == "shredded"
        assert request.wait(timeout=60).state == "verified"  # wait() purges itself


@pytest.mark.parametrize("bad", ["Background", "yes", 1, None])
def test_auto_purge_refuses_other_values(store_factory: StoreFactory, bad: Any) -> None:
    with pytest.raises(InvalidValueError, match="auto_purge must be 'background'"):
        store_factory(purge=bad)


@pytest.mark.parametrize("flag", [True, False])
def test_auto_purge_refuses_a_boolean_saying_to_name_the_mode(
    store_factory: StoreFactory, flag: bool
) -> None:
    store = store_factory(purge="off")
    with pytest.raises(InvalidValueError, match="takes a mode by name, not True or False"):
        store.auto_purge = flag  # type: ignore[assignment]
    assert store.purge_mode == "off"
    with pytest.raises(InvalidValueError, match="takes a mode by name, not True or False"):
        open_location(store_factory.location(store), auto_purge=flag)


@pytest.mark.sqlite_only
def test_a_stray_file_holding_residue_is_named_and_not_rescanned_until_it_changes(
    tmp_path: Path, scans: Scans
) -> None:
    data = tmp_path / "data"
    secret = "CNRYstray 7f3a9c21 a note someone also pasted into a file"
    with cenotaph.open(data) as store:
        store.write(SCOPE, "pasted", secret)
        (data / "notes").mkdir()
        (data / "notes" / "copy.txt").write_text(f"my notes: {secret}\n")
        stuck = store.forget(SCOPE, "pasted")
        with pytest.raises(ErasureNotProvableError) as info:
            stuck.wait(timeout=60)
        status = stuck.status()
        assert status.stuck and "notes/copy.txt" in str(status.gaps), status.gaps
        assert "notes/copy.txt" in str(info.value)
        assert "CNRYstray" not in str(status.to_dict()), "the gap names the file, never its content"
        before = len(scans.calls)
        store.purge()  # nothing changed: the stuck request is not scanned again
        assert len(scans.calls) == before
        (other,) = _forget_some(store, 1)
        assert other.wait(timeout=60).state == "verified"
        own = store.confirm_erasure(other.id).layers["scan"].evidence["probes"]
        assert scans.calls[before:] == [own], "later scans carry only their own requests' probes"
        assert stuck.status().state == "purged"
        (data / "notes" / "copy.txt").unlink()  # what releases it
        assert stuck.wait(timeout=60).state == "verified"
