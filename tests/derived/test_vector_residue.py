"""S1 for embeddings: no vector bytes and no plaintext in any file of the data directory, while the store
is open (read from a second process), after close, and before and after a forget.

The probe is the exact float32 embedding the store computes (``HashingEmbedder().embed([memory_text(key, v,
metadata)])``), cut into float-aligned 32-byte windows; any window found anywhere is a leak. The store keeps
vectors at rest sealed under each record's keys (``index.atrest``): the plain float32 bytes must still be in
no file. Files are read only from a
process without the store open, or after closing it: closing a descriptor of the database file in a
process that has the store open would drop SQLite's POSIX locks.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from tests.kit.oracle import scan_here, scan_in_child
from tests.kit.stores import StoreFactory

from cenotaph.index.embedder import value_text

from ._helpers import embedding_bytes, text_forms, vector_windows

SCOPE_ID = f"s{secrets.token_hex(6)}"
SCOPE = f"tenant:acme/user:alice/session:{SCOPE_ID}"


def _values(canary: str) -> dict[str, object]:
    return {
        "string": f"Cardiology appointment {canary} with doctor Zyxwv on Tuesday at noon",
        "object": {"note": f"blood pressure {canary} reading", "tags": ["heart", "ecg"], "n": 7, "ok": True},
        "long": " ".join(f"word{i}{canary[:6]}" for i in range(300)),
    }


def _needles(values: dict[str, object], canary: str, meta: str, key: str) -> dict[str, list[bytes]]:
    needles: dict[str, list[bytes]] = {
        f"vector:{label}": vector_windows(v, f"{key}-{label}", {"m": meta}) for label, v in values.items()
    }
    needles["text:canary"] = text_forms(canary)
    needles["text:metadata"] = text_forms(meta)
    needles["text:key"] = text_forms(key)
    needles["text:scope-id"] = text_forms(SCOPE_ID)
    needles["text:string-value"] = text_forms(str(values["string"]))
    needles["text:object-value-text"] = text_forms(value_text(values["object"]))
    return needles


def _clean(result: dict[str, Any], where: str) -> None:
    assert result["files"] >= 2 and result["bytes"] > 0, f"{where}: nothing was scanned: {result}"
    assert result["matches"] == [], f"{where}: leaked {result['matches']}"


@pytest.mark.sqlite_only
def test_the_probes_find_a_planted_vector(tmp_path: Path) -> None:
    """Positive control: the same windows and scanner find an embedding planted in a file."""
    value = "Cardiology appointment with doctor Zyxwv"
    needles = {"vector": vector_windows(value)}
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "noise").write_bytes(bytes(4096))
    (planted / "blob").write_bytes(secrets.token_bytes(1000) + embedding_bytes(value)[0] + bytes(4096))
    assert scan_here(planted, needles)["matches"] == [["vector", "blob"]]
    assert scan_in_child(planted, needles, tmp_path)["matches"] == [["vector", "blob"]]
    # a single window's worth (32 bytes) is enough
    (planted / "blob").write_bytes(bytes(100) + needles["vector"][3] + bytes(100))
    assert scan_here(planted, needles)["matches"] == [["vector", "blob"]]


@pytest.mark.sqlite_only
@pytest.mark.parametrize("mode", ["compliance", "operational"])
def test_no_vector_bytes_or_plaintext_at_rest(store_factory: StoreFactory, tmp_path: Path, mode: str) -> None:
    canary = f"cnry{secrets.token_hex(8)}"
    meta = f"meta{secrets.token_hex(8)}"
    key = f"key{secrets.token_hex(8)}"
    values = _values(canary)
    needles = _needles(values, canary, meta, key)

    store = store_factory(purge=True)
    directory = store_factory.data_dir(store)
    records = {
        label: store.write(SCOPE, f"{key}-{label}", value, metadata={"m": meta})
        for label, value in values.items()
    }
    for label, record in records.items():  # the probes are the very bytes the store computes and seals
        computed = store._search.embed_records([record])[0].astype("<f4").tobytes()
        assert computed in embedding_bytes(values[label], record.key, {"m": meta})
    for i in range(20):  # other records so pages fill up and the WAL checkpoints
        store.write("tenant:acme/user:bob", f"filler{i}", f"filler memory number {i} about gardening")
    hits = store.search(SCOPE, "cardiology appointment heart ecg", k=10)  # builds the in-memory index
    assert {h.record.id for h in hits} >= {records["string"].id, records["object"].id}
    _clean(scan_in_child(directory, needles, tmp_path), "open, before forget")
    store.close()
    _clean(scan_here(directory, needles), "closed, before forget")

    store = store_factory.reopen(store)
    assert store.search(SCOPE, "cardiology appointment", k=1)[0].record.id == records["string"].id
    request = store.forget(SCOPE, mode=mode)
    if mode == "operational":
        store.purge()
    else:
        assert request.status().state == "verified"
    assert store.search(SCOPE, "cardiology appointment") == []
    _clean(scan_in_child(directory, needles, tmp_path), "open, after forget")
    store.close()
    _clean(scan_here(directory, needles), "closed, after forget")

    store = store_factory.reopen(store)  # a rebuild of the index after restart writes nothing either
    assert store.search("tenant:acme/user:bob", "gardening", k=3)
    store.close()
    _clean(scan_here(directory, needles), "closed, after restart")
