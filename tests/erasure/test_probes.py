"""S4: the probes a forget samples cover everything it destroys, even past the per-request cap."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import cenotaph
from cenotaph.erasure import probes as probes_module
from cenotaph.erasure.probes import open_probes

SUBJECT = "tenant:t/user:u"


def _wrapped(db: Path, sql: str) -> list[bytes]:
    conn = sqlite3.connect(db)
    try:
        return [bytes(r[0]) for r in conn.execute(sql)]
    finally:
        conn.close()


def test_capped_probes_still_cover_the_last_records_and_the_subject_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap used to keep the first probes in order: with many records, the later records and
    every scope and subject key (sampled last) were never probed."""
    cap = 60
    monkeypatch.setattr(probes_module, "MAX_PROBES_PER_REQUEST", cap)
    with cenotaph.open(tmp_path, auto_purge=False) as store:
        for i in range(80):
            store.write(SUBJECT, f"k{i:03}", f"note {i} " * 20)
        db = tmp_path / "cenotaph.db"
        subject_keys = _wrapped(db, "SELECT wrapped FROM subjects")
        key_of = dict(_pairs(db, "SELECT id, wrapped FROM records"))
        request = store.forget_subject(SUBJECT)
        row = store._erasure.row(request.id)
        sampled = set(open_probes(store._provider.erasure_secret(), request.id, row.probes) or [])
    assert len(sampled) == cap
    assert subject_keys and set(subject_keys) <= sampled
    order = json.loads(row.plan)["destroy_records"]  # the order the probes were sampled in
    probed = [i for i, record_id in enumerate(order) if key_of[record_id] in sampled]
    assert probed and max(probed) >= len(order) * 3 // 4, "records late in the plan are probed too"
    windows = sampled - set(subject_keys) - set(key_of.values())
    assert windows, "content windows get a share of the budget too"


def _pairs(db: Path, sql: str) -> list[tuple[str, bytes]]:
    conn = sqlite3.connect(db)
    try:
        return [(str(r[0]), bytes(r[1])) for r in conn.execute(sql)]
    finally:
        conn.close()
