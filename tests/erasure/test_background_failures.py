"""A background purge that fails reaches a caller, once; ``close()`` finishes a purge still due.

The purge is made to fail by the fault injection of ``cenotaph.faults`` (``CENOTAPH_FAIL=<point>``
raises a StorageError there, as a failing disk would). A run of failed passes nobody waited for
is told to the next caller that can observe it -- ``raise_background_failure()`` (what the
framework adapters call at every request), ``confirm_erasure()``, ``close()`` -- and to no one
after; a waiter (``request.wait()``) is told by its own pass. No sleeps: conditions are polled
with deadlines.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from tests.kit.stores import StoreFactory, open_location

import cenotaph
from cenotaph.errors import ErasureNotProvableError, InvalidValueError, StorageError
from cenotaph.faults import FAIL_ENV

SCOPE = "tenant:acme/user:alice/session:s1"
FAILING = "purge.rows"  # rows removed and committed; the pass fails before the WAL and the scan
TOLD = "a background purge failed (injected storage failure at purge.rows"


def _forget(store: cenotaph.Store, key: str = "k") -> cenotaph.ErasureRequest:
    store.write(SCOPE, key, f"note {key} " * 8)
    return store.forget(SCOPE, key)


def _until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)  # a poll interval, not synchronisation: the condition decides


def _raised(call: Callable[[], object]) -> StorageError | None:
    try:
        call()
    except StorageError as exc:
        return exc
    return None


def test_a_failed_background_purge_is_raised_to_the_next_caller_exactly_once(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_factory(purge="background")
    monkeypatch.setenv(FAIL_ENV, FAILING)
    request = _forget(store)
    told: list[StorageError] = []

    def told_now() -> bool:
        failure = _raised(store.raise_background_failure)
        told.extend([failure] if failure is not None else [])
        return bool(told)

    _until(told_now, "a caller was told")
    (failure,) = told
    assert str(failure).startswith(TOLD)
    assert "store.purge()" in str(failure) and "store.erasure(request_id)" in str(failure), "what to do"
    assert isinstance(failure.__cause__, StorageError)
    # the worker goes on retrying, and failing: the same run of failures is not told again
    worker = store._erasure.worker
    assert worker.wait_until_ended(worker.passes_ended + 2, timeout=30), "two more passes failed"
    assert _raised(store.raise_background_failure) is None
    with pytest.raises(ErasureNotProvableError) as caught:
        store.confirm_erasure(request.id)
    assert "background purge failed" not in str(caught.value)
    assert request.status().state == "shredded" and store.read(SCOPE, "k") is None  # in effect
    # fixed: a wait finishes the erasure, and the run of failures is over
    monkeypatch.delenv(FAIL_ENV)
    assert request.wait(timeout=60).state == "verified"
    assert _raised(store.raise_background_failure) is None
    # a new failure after a pass that succeeded is a new run: told again
    monkeypatch.setenv(FAIL_ENV, FAILING)
    second = _forget(store, "k2")
    _until(lambda: _raised(store.raise_background_failure) is not None, "the second run told")
    monkeypatch.delenv(FAIL_ENV)
    assert second.wait(timeout=60).state == "verified"


def test_a_waiter_is_told_by_its_own_pass_and_nobody_after_it(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_factory(purge="background")
    monkeypatch.setenv(FAIL_ENV, FAILING)
    request = _forget(store)
    with pytest.raises(StorageError, match=r"injected storage failure at purge\.rows"):
        request.wait(timeout=60)
    assert _raised(store.raise_background_failure) is None
    monkeypatch.delenv(FAIL_ENV)
    assert request.wait(timeout=60).state == "verified"


def test_confirm_erasure_names_a_background_failure_nobody_was_told_of(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_factory(purge="background")
    monkeypatch.setenv(FAIL_ENV, FAILING)
    request = _forget(store)
    messages: list[str] = []

    def confirm_names_it() -> bool:
        with pytest.raises(ErasureNotProvableError) as caught:
            store.confirm_erasure(request.id)
        messages.append(str(caught.value))
        return TOLD in messages[-1]

    _until(confirm_names_it, "confirm_erasure named the failure")
    assert "store.purge()" in messages[-1]
    assert not confirm_names_it(), "named once"
    assert _raised(store.raise_background_failure) is None
    monkeypatch.delenv(FAIL_ENV)
    assert request.wait(timeout=60).state == "verified"


def test_close_finishes_a_purge_still_due(store_factory: StoreFactory) -> None:
    """A forget made just before close is purged and verified by close, not left for the next
    open (reopened with purging off, nothing else could have finished it)."""
    store = store_factory(purge="background")
    requests = [_forget(store, f"k{i}") for i in range(3)]
    store.close()
    with open_location(store_factory.location(store), auto_purge="off") as again:
        assert {again.erasure(r.id).status().state for r in requests} == {"verified"}


def test_close_raises_a_failed_purge_nobody_was_told_of_after_closing(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_factory(purge="background")
    monkeypatch.setenv(FAIL_ENV, FAILING)
    request = _forget(store)
    with pytest.raises(StorageError, match="background purge failed") as caught:
        store.close()
    assert "store.purge()" in str(caught.value)
    with pytest.raises(InvalidValueError, match="closed"):
        store.read(SCOPE, "k")  # closed all the same
    store.close()  # and only once: closing again tells nothing
    monkeypatch.delenv(FAIL_ENV)
    again = store_factory.reopen(store)  # the next open resumes what the failed pass left
    assert again.erasure(request.id).wait(timeout=60).state == "verified"


def test_close_of_an_idle_worker_waits_for_nothing(store_factory: StoreFactory) -> None:
    store = store_factory(purge="background")
    request = _forget(store)
    assert request.wait(timeout=60).state == "verified"
    started = time.monotonic()
    store.close(purge_timeout=30)
    assert time.monotonic() - started < 5
