"""A store written by the release with schema 7 (tests/data/schema7_store, made by
tests/data/make_schema7_store.py) opens with this code, is migrated to the current schema, and
keeps every record, tombstone, erasure, certificate and audit chain; its old records still
crypto-shred."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

import cenotaph
from cenotaph.backends.sqlite.backend import DB_NAME
from cenotaph.backends.sqlite.schema import MIGRATIONS
from cenotaph.errors import DerivedFromForgottenError, ForgottenError

DATA = Path(__file__).resolve().parent / "data"
A = "tenant:acme/user:alice"
B = "tenant:acme/user:bob"
T = "tenant:acme"


@pytest.fixture
def legacy(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    target = tmp_path / "store"
    shutil.copytree(DATA / "schema7_store", target)
    facts = json.loads((DATA / "schema7_store.json").read_text())
    with sqlite3.connect(target / DB_NAME) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == facts["schema"] == 7
    db.close()
    return target, facts


def _ids(facts: dict[str, object]) -> dict[str, str]:
    ids = facts["ids"]
    assert isinstance(ids, dict)
    return {str(k): str(v) for k, v in ids.items()}


def test_every_record_reads_back_after_migration(legacy: tuple[Path, dict[str, object]]) -> None:
    path, facts = legacy
    ids = _ids(facts)
    with cenotaph.open(path) as store:
        with sqlite3.connect(path / DB_NAME) as db:
            assert db.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS[-1][0]
        db.close()
        expected = {
            (A, "diet"): ("diet", "vegetarian"),
            (A, "prefs"): ("prefs", {"theme": "dark", "langs": ["en", "fr"]}),
            (A, "age"): ("age", 41),
            (f"{A}/session:s1", "note"): ("session", "likes tea"),
            (B, "diet"): ("bob", "vegan"),
            (T, "policy"): ("tenant", [1, 2.5, None, True]),
            (T, "summary"): ("summary", "alice and bob eat plants"),
            (T, "digest"): ("digest", "plants"),
            ("tenant:acme/user:carol", "diet"): ("carol", "omnivore"),
        }
        for (scope, key), (name, value) in expected.items():
            record = store.read(scope, key)
            assert record is not None, name
            assert (record.id, record.value) == (ids[name], value)
            got = store.get(ids[name])
            assert got is not None and got.value == value
        prefs = store.get(ids["prefs"])
        assert prefs is not None and prefs.metadata == {"tag": "ui"}
        age = store.get(ids["age"])
        assert age is not None and age.expires_at is not None
        bob = store.get(ids["bob"])
        assert bob is not None and {"user:bob", "household:h1"} <= set(bob.subjects)
        summary = store.get(ids["summary"])
        assert summary is not None and set(summary.derived_from) == {ids["diet"], ids["bob"]}
        assert {"user:bob", "household:h1"} <= set(summary.subjects)  # inherited from its source
        digest = store.get(ids["digest"])
        assert digest is not None and digest.derived_from == (ids["summary"],)
        # forgotten before the migration: still gone, by read, get, list and search
        for name in ("carol_x", "dave", "over", "over2"):
            assert store.get(ids[name]) is None, name
        assert store.read("tenant:acme/user:carol", "secret") is None
        assert store.read(B, "city") is None
        assert store.read("tenant:acme/user:dave", "diet") is None
        listed = {r.id for r in store.list(T, include_descendants=True)}
        assert listed == {ids[n] for _, (n, _) in expected.items()}
        hits = store.search(T, "plants diet", include_descendants=True, k=20)
        assert hits and {h.record.id for h in hits} <= listed


def test_tombstones_erasures_certificate_and_audit_survive(legacy: tuple[Path, dict[str, object]]) -> None:
    path, facts = legacy
    ids = _ids(facts)
    with cenotaph.open(path) as store:
        assert store.verify_audit()
        assert store.check_integrity() == []
        status = store.confirm_erasure(str(facts["subject_erasure"]))
        assert status.state == "verified"
        assert store.erasure(str(facts["compliance"])).status().state == "verified"
        assert {e.id for e in store.erasures()} >= {
            str(facts["compliance"]),
            str(facts["operational"]),
            str(facts["subject_erasure"]),
        }
        certificate = store.attest(str(facts["subject_erasure"]))
        cenotaph.verify_certificate(certificate.to_json(), store.public_key)
        old = facts["certificate"]
        assert isinstance(old, dict)
        assert old["public_key"] == store.public_key  # the same signing key
        cenotaph.verify_certificate(old, store.public_key)  # the certificate issued before still verifies
        # tombstones win over the migrated rows
        with pytest.raises(ForgottenError):
            store.write("tenant:acme/user:carol", "secret", "back")
        with pytest.raises(ForgottenError):
            store.write(T, "anything", "x", subjects=["household:h2"])
        with pytest.raises(DerivedFromForgottenError):
            store.write(T, "from-gone", "x", derived_from=[ids["carol_x"]])
        with pytest.raises(DerivedFromForgottenError):
            store.write(T, "from-dave", "x", derived_from=[ids["dave"]])
        with pytest.raises(ForgottenError):  # an operational forget tombstones too
            store.write(B, "city", "Berlin")
        token = store.reauthorize(B, "city")
        assert store.write(B, "city", "Berlin", reauthorization=token).value == "Berlin"
        assert store.read(B, "city") is not None


def test_a_migrated_record_still_crypto_shreds(legacy: tuple[Path, dict[str, object]]) -> None:
    """Forgetting a subject after the migration destroys what the old rows need: the record and
    the records derived from it become unreadable, and the erasure verifies."""
    path, facts = legacy
    ids = _ids(facts)
    with cenotaph.open(path, auto_purge="sync") as store:
        written = store.write(A, "new", "after the migration", derived_from=[ids["digest"]])
        request = store.forget_subject("household:h1")  # bob's record, the summary, the digest
        assert request.wait(timeout=60).state == "verified"
        for name in ("bob", "summary", "digest"):
            assert store.get(ids[name]) is None, name
        assert store.get(written.id) is None  # derived (transitively) from bob's record
        assert store.get(ids["diet"]) is not None
        store.forget(A)  # a whole scope, old and new records
        assert store.read(A, "diet") is None and store.read(f"{A}/session:s1", "note") is None
        assert store.read(T, "policy") is not None
        assert store.check_integrity() == []
    with cenotaph.open(path) as store:  # and after a reopen
        assert store.get(ids["bob"]) is None and store.get(ids["diet"]) is None
        assert store.read(T, "policy") is not None
        assert store.verify_audit()
