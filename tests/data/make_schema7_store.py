"""Writes tests/data/schema7_store/: a small data directory (database and its keyring) as the
release with schema 7 leaves it, for the migration test. Run from the repository root with that
release's code on the path (``PYTHONPATH=src python tests/data/make_schema7_store.py``); it
prints what the test expects to find, which test_layout_migration.py pins.

Records in several scopes, values of every JSON kind, metadata, a ttl, derived records (one of
a derived record), subjects, a key forgotten (compliance) and one forgotten operationally, a
subject erasure verified with its certificate, and vectors at rest after a search.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import cenotaph

HERE = Path(__file__).resolve().parent
TARGET = HERE / "schema7_store"


def main() -> None:
    if TARGET.exists():
        shutil.rmtree(TARGET)
    store = cenotaph.open(TARGET, auto_purge="sync")
    a = "tenant:acme/user:alice"
    b = "tenant:acme/user:bob"
    ids: dict[str, str] = {}
    ids["diet"] = store.write(a, "diet", "vegetarian").id
    ids["prefs"] = store.write(
        a, "prefs", {"theme": "dark", "langs": ["en", "fr"]}, metadata={"tag": "ui"}
    ).id
    ids["age"] = store.write(a, "age", 41, ttl=10 * 365 * 86400).id
    ids["session"] = store.write(f"{a}/session:s1", "note", "likes tea").id
    ids["bob"] = store.write(b, "diet", "vegan", subjects=["user:bob", "household:h1"]).id
    ids["tenant"] = store.write("tenant:acme", "policy", [1, 2.5, None, True]).id
    ids["summary"] = store.write(
        "tenant:acme", "summary", "alice and bob eat plants", derived_from=[ids["diet"], ids["bob"]]
    ).id
    ids["digest"] = store.write("tenant:acme", "digest", "plants", derived_from=[ids["summary"]]).id
    ids["carol"] = store.write("tenant:acme/user:carol", "diet", "omnivore").id
    ids["carol_x"] = store.write("tenant:acme/user:carol", "secret", "gone soon").id
    ids["dave"] = store.write("tenant:acme/user:dave", "diet", "pescatarian", subjects=["household:h2"]).id
    ids["over"] = store.write(b, "city", "Lyon").id
    ids["over2"] = store.write(b, "city", "Paris").id  # replaces the first version
    hits = store.search("tenant:acme", "plants diet", include_descendants=True, k=20)  # vectors at rest
    compliance = store.forget("tenant:acme/user:carol", "secret")  # a key crypto-shredded, purged
    operational = store.forget(b, "city", mode="operational")
    erasure = store.forget_subject("household:h2")  # dave's record goes with its subject key
    status = erasure.wait(timeout=60)
    certificate = store.attest(erasure.id)
    store.close()
    with sqlite3.connect(TARGET / "cenotaph.db") as db:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        vectors = db.execute("SELECT count(*) FROM vectors").fetchone()[0]
    db.close()
    for leftover in ("cenotaph.db-wal", "cenotaph.db-shm"):
        (TARGET / leftover).unlink(missing_ok=True)
    json.dump(
        {
            "schema": version,
            "ids": ids,
            "hits": len(hits),
            "vectors": vectors,
            "compliance": compliance.id,
            "operational": operational.id,
            "subject_erasure": erasure.id,
            "status": str(status),
            "certificate": certificate.to_dict() if hasattr(certificate, "to_dict") else None,
        },
        sys.stdout,
        indent=2,
    )
    print()


if __name__ == "__main__":
    main()
