"""A compliance forget whose process was SIGKILLed between its ledger entry and its COMMIT is
replayed at the next open; the consumers that took its records are asked then, as its own commit
would have asked them."""

from __future__ import annotations

from pathlib import Path

from tests.test_crash import SCOPE, _crash_forget, _ledger_ids, _raw_erasure_ids

import cenotaph


def test_a_forget_replayed_from_the_ledger_asks_the_consumers(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path, auto_purge="off") as store:
        record = store.write(SCOPE, "k", "secret")
        store.write(SCOPE, "other", "kept")
        consumer = store.register_consumer("summarizer")
        assert consumer.read(SCOPE, "k") is not None

    request_id, _ = _crash_forget(tmp_path, "k", "compliance", "after-ledger")
    assert request_id in _ledger_ids(tmp_path) and request_id not in _raw_erasure_ids(tmp_path)

    with cenotaph.open(tmp_path, auto_purge="off") as store:  # the replay
        (event,) = store.consumer(consumer.id).events()
        assert event.request_id == request_id
        assert [r.record_id for r in event.records] == [record.id]
    with cenotaph.open(tmp_path, auto_purge="off") as store:  # replayed once, asked once
        assert len(store.consumer(consumer.id).events()) == 1
