"""Cross-connection cache invalidation under threads (R2, W1).

A store learns that another process committed from SQLite's ``data_version``, which it reads
once per operation. The race suite once caught a read that started after another process's
forget had returned and still answered from the resolution cache: one thread had consumed the
change and was still dropping the caches when a second thread, seeing no change, served from
them. These tests hold the first thread inside its invalidation and check what the second sees.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import cenotaph

SCOPE = "tenant:acme/user:alice"


def _hold_first_invalidation(store: cenotaph.Store) -> tuple[threading.Event, threading.Event]:
    """Make the store's next cache invalidation block until released; (entered, release)."""
    entered, release = threading.Event(), threading.Event()
    original = store._invalidate_resolved
    calls = {"n": 0}

    def slow() -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            entered.set()
            assert release.wait(10), "the test never released the invalidation"
        original()

    store._invalidate_resolved = slow  # type: ignore[method-assign]
    return entered, release


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # reported to the test, never swallowed
            out["error"] = exc

    thread = threading.Thread(target=run)
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
        generation = store._resolved_gen
        store._drop_caches()  # what a forget does, between the decrypt and the remember
        store._remember(written, generation)
        assert written.id not in store._cache
        store._remember(written, store._resolved_gen)
        assert written.id in store._cache


def test_the_tombstone_filter_sees_another_connections_forget(tmp_path: Path) -> None:
    """The in-memory tombstone set is per forget epoch: a forget elsewhere refreshes it."""
    with cenotaph.open(tmp_path) as writer, cenotaph.open(tmp_path) as forgetter:
        writer.write(SCOPE, "diagnosis", "flu")  # the filter now holds "no tombstones" at epoch 0
        forgetter.forget(SCOPE, "diagnosis", mode="operational")
        try:
            writer.write(SCOPE, "diagnosis", "flu again")
        except cenotaph.ForgottenError:
            pass
        else:
            raise AssertionError("a write after another connection's forget landed")
        writer.write(SCOPE, "unrelated", "ok")  # not covered: lands through the filter


@pytest.mark.parametrize("limit", [0, 1, 100_000])
def test_dominance_is_the_same_with_the_filter_off_or_overflowing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    from cenotaph import writes

    monkeypatch.setattr(writes, "TOMBSTONE_FILTER_LIMIT", limit)
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
