"""Canary data for the erasure tests: two subjects' records, and what "readable" and "gone" mean.

Every value carries its subject's canary; long values repeat it in every few hundred bytes, so
any page-sized fragment of one would contain the canary. The bodies are random (not one repeated
character), so every window of a value is distinct.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.kit.oracle import sql

import cenotaph
from cenotaph.errors import ForgottenError

A = "tenant:t/user:a"
B = "tenant:t/user:b"
DB = "cenotaph.db"


@dataclass
class Written:
    subject: str
    canary: str
    records: dict[str, tuple[str, str, Any]] = field(default_factory=dict)  # id -> (scope, key, value)

    @property
    def ids(self) -> list[str]:
        return sorted(self.records)


def long_value(canary: str, size: int) -> str:
    parts: list[str] = []
    n = 0
    while n < size:
        part = f"{canary}:{len(parts):04d}:{secrets.token_hex(96)}"
        parts.append(part)
        n += len(part) + 1
    return " ".join(parts)


def populate(
    store: cenotaph.Store, subject: str, label: str, *, short: int = 8, long: int = 2, long_size: int = 20_000
) -> Written:
    """``short`` small records and ``long`` multi-page ones about ``subject``, across its scope and
    two session scopes below it, written both one by one and in a batch."""
    canary = f"CNRY{label}{secrets.token_hex(8)}"
    out = Written(subject, canary)
    scopes = [subject, f"{subject}/session:s1", f"{subject}/session:s2"]
    items: list[dict[str, Any]] = []
    for i in range(short):
        value: Any = f"{canary} short note {i}" if i % 2 else {"note": f"{canary} #{i}", "n": i}
        items.append({"scope": scopes[i % 3], "key": f"short{i}", "value": value})
    for i in range(long):
        items.append({"scope": scopes[i % 3], "key": f"long{i}", "value": long_value(canary, long_size)})
    half = len(items) // 2
    records = [store.write(**item) for item in items[:half]] + store.write_many(items[half:])
    for item, record in zip(items, records, strict=True):
        out.records[record.id] = (item["scope"], item["key"], item["value"])
    return out


def assert_readable(store: cenotaph.Store, written: Written) -> None:
    for record_id, (scope, key, value) in written.records.items():
        got = store.get(record_id)
        assert got is not None and got.value == value, f"{written.subject}: record {key} is not readable"
        read = store.read(scope, key, fallthrough=False)
        assert read is not None and read.value == value
    listed = {r.id for r in store.list(written.subject, include_descendants=True)}
    assert set(written.ids) <= listed
    exported = store.export_subject(written.subject)
    assert {r["id"] for r in exported["records"]} >= set(written.ids)


def assert_gone(store: cenotaph.Store, written: Written) -> None:
    """Nothing of ``written`` is returned by any read path (R2)."""
    for record_id, (scope, key, _) in written.records.items():
        assert store.get(record_id) is None
        assert store.read(scope, key) is None
    assert store.list(written.subject, include_descendants=True) == []
    hits = store.search(written.subject, written.canary, k=50, include_descendants=True)
    assert [h.record.id for h in hits] == []
    exported = store.export_subject(written.subject)
    assert exported["records"] == [] and exported["derived_records"] == []


def assert_write_refused(store: cenotaph.Store, written: Written) -> None:
    with pytest.raises(ForgottenError):
        store.write(written.subject, "after", "should be refused")


def cells(db: Path, ids: Iterable[str], *, immutable: bool = False, subject_keys: bool = True) -> list[bytes]:
    """Every ciphertext and wrapped-key cell of these records, read from the file by a child:
    records.ciphertext/wrapped, lineage.wrapped/subjects and (``subject_keys``) their subjects'
    wrapped keys. (Embeddings never reach disk: they are computed in memory from decrypted values.)"""
    ids = list(ids)
    marks = ",".join("?" * len(ids))
    rows = sql(db, f"SELECT ciphertext, wrapped FROM records WHERE id IN ({marks})", ids, immutable=immutable)
    rows += sql(
        db, f"SELECT wrapped, subjects FROM lineage WHERE record_id IN ({marks})", ids, immutable=immutable
    )
    if subject_keys:
        rows += sql(
            db,
            "SELECT DISTINCT s.wrapped FROM subjects s JOIN record_subjects rs ON rs.subject_token = s.token "
            f"WHERE rs.record_id IN ({marks})",
            ids,
            immutable=immutable,
        )
    blobs = [bytes(v) for row in rows for v in row if isinstance(v, bytes)]
    # 2 + 2 cells per record and one subject key
    assert len(blobs) == 4 * len(ids) + int(subject_keys), (
        "the snapshot should hold every ciphertext and wrapped key"
    )
    return blobs
