"""What is at rest: W4 (tombstone minimality), S1 (no plaintext at rest), S2 (crypto-shredding).

These tests read the store's files and rows directly, as an attacker with a copy would.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from collections.abc import Iterable
from pathlib import Path

import ahocorasick
import pytest
from tests.conformance._scopes import S1, T, U, V
from tests.kit.stores import StoreFactory

from cenotaph import Store
from cenotaph.index.embedder import HashingEmbedder, memory_text

LONG_VALUE_CHARS = 100_000
PURGE = pytest.mark.parametrize("purge", [False, True], ids=["no-purge", "auto-purge"])
WINDOW = 40  # chars of a long canary searched for at a time (pages split long values)
WINDOWS = 120  # spaced so that any ~900-char fragment of the long canary contains a whole window
VECTOR_WINDOW = 64  # bytes of a float32 embedding searched for at a time


def canary(label: str) -> str:
    return f"cnry{label}{secrets.token_hex(10)}"


def forms(text: str) -> list[bytes]:
    """Plain UTF-8, hex (lower and upper) and UTF-16-LE forms of ``text``."""
    raw = text.encode("utf-8")
    return [raw, raw.hex().encode(), raw.hex().upper().encode(), text.encode("utf-16-le")]


def probes(text: str) -> list[bytes]:
    """Byte strings whose presence anywhere means ``text`` (or a piece of a long one) leaked."""
    if len(text) <= 2 * WINDOW:
        return forms(text)
    stride = (len(text) - WINDOW) // (WINDOWS - 1)
    return [p for i in range(WINDOWS) for p in forms(text[i * stride : i * stride + WINDOW])]


def vector_probes(text: str) -> list[bytes]:
    """Windows of a record's embedding (the default embedder's float32 bytes of its ``memory_text``), each
    with at least two non-zero floats so that zeroed pages cannot match by chance."""
    embedder = HashingEmbedder()
    raw = embedder.embed([text])[0].astype("<f4").tobytes()
    out: list[bytes] = []
    for start in range(0, len(raw) - VECTOR_WINDOW + 1, VECTOR_WINDOW // 2):
        window = raw[start : start + VECTOR_WINDOW]
        floats = [window[i : i + 4] for i in range(0, len(window), 4)]
        if sum(f != bytes(4) for f in floats) >= 2:
            out.append(window)
    assert out, "the embedding should not be all zero"
    return out


def unsalted_hashes(text: str) -> list[bytes]:
    """Digests anyone can recompute from a guessed name (W4 forbids them at rest)."""
    raw = text.encode("utf-8")
    out: list[bytes] = []
    for algo in ("sha256", "sha1", "md5", "blake2b"):
        digest = hashlib.new(algo, raw).digest()
        out += [digest, digest.hex().encode(), digest.hex().upper().encode()]
    return out


class Detector:
    """Finds any of many byte strings in a blob in one pass (Aho-Corasick over latin-1 text)."""

    def __init__(self, needles: dict[str, list[bytes]]) -> None:
        self._automaton = ahocorasick.Automaton()
        for name, items in needles.items():
            for item in items:
                assert item, name
                self._automaton.add_word(item.decode("latin-1"), name)
        self._automaton.make_automaton()

    def leaks(self, blob: bytes) -> list[str]:
        return sorted({name for _, name in self._automaton.iter(blob.decode("latin-1"))})

    def files(self, paths: Iterable[Path]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for path in paths:
            hits = self.leaks(path.read_bytes())
            if hits:
                found[str(path)] = hits
        return found


def _cell_bytes(cell: object) -> bytes:
    if cell is None:
        return b""
    if isinstance(cell, bytes):
        return cell
    return str(cell).encode("utf-8")


def table_leaks(db: sqlite3.Connection, detector: Detector) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert "tombstones" in tables and "records" in tables
    for table in tables:
        for row in db.execute(f'SELECT * FROM "{table}"'):
            hits = detector.leaks(b"\x00".join(_cell_bytes(c) for c in row))
            if hits:
                found.setdefault(table, [])
                found[table] = sorted({*found[table], *hits})
    return found


class Canaries:
    """A fresh set of canaries and a store populated with them."""

    def __init__(self) -> None:
        self.tenant = canary("tenant")
        self.user = canary("user")
        self.session = canary("session")
        self.doc = canary("doc")
        self.key = canary("key")
        self.key2 = canary("keytwo")
        self.subject = canary("subject")
        self.meta_key = canary("metakey")
        self.meta_value = canary("metavalue")
        self.short = canary("short")
        self.long = (canary("long") + secrets.token_hex(LONG_VALUE_CHARS // 2))[:LONG_VALUE_CHARS]
        self.reason = canary("reason")
        self.user_scope = f"tenant:{self.tenant}/user:{self.user}"
        self.session_scope = f"{self.user_scope}/session:{self.session}"
        self.doc_scope = f"tenant:{self.tenant}/doc:{self.doc}"
        self.idp = f"idp:{self.subject}"

    def populate(self, store: Store) -> None:
        store.write(
            self.session_scope,
            self.key,
            self.short_record_value(),
            subjects=[self.idp],
            metadata={self.meta_key: self.meta_value},
        )
        store.write(self.user_scope, self.key2, self.long)
        store.write(self.doc_scope, self.key, [self.short, {"nested": self.short}], ttl=3600)
        with store.session(self.doc_scope) as s:
            s.read(self.session_scope, self.key)
            s.write(self.doc_scope, self.key2, "derived", metadata={"m": self.meta_value})

    def forget_all(self, store: Store) -> None:
        store.forget(self.session_scope, self.key, reason=self.reason)
        store.forget(self.doc_scope, self.key2, mode="operational", reason=self.reason)
        store.forget(self.doc_scope, reason=self.reason)
        store.forget_subject(self.idp, reason=self.reason)
        store.forget(self.user_scope, reason=self.reason)

    def names(self) -> dict[str, str]:
        return {
            "tenant id": self.tenant,
            "user id": self.user,
            "session id": self.session,
            "doc id": self.doc,
            "key": self.key,
            "key 2": self.key2,
            "subject id": self.subject,
            "subject": self.idp,
            "scope path": self.user_scope,
            "session path": self.session_scope,
            "doc path": self.doc_scope,
            "metadata key": self.meta_key,
        }

    def short_record_value(self) -> dict[str, object]:
        return {"note": self.short, "n": 1}

    def short_record_text(self) -> str:
        """What the store embeds for the short record: its key, metadata and value."""
        return memory_text(self.key, self.short_record_value(), {self.meta_key: self.meta_value})

    def detector(self) -> Detector:
        """Every form of every canary, unsalted hashes of the names, and embedding windows."""
        texts = {
            **self.names(),
            "metadata value": self.meta_value,
            "short value": self.short,
            "long value": self.long,
            "reason": self.reason,
        }
        needles = {name: probes(text) for name, text in texts.items()}
        needles |= {f"unsalted hash of {name}": unsalted_hashes(text) for name, text in self.names().items()}
        needles["embedding of the short record"] = vector_probes(self.short_record_text())
        return Detector(needles)


def test_the_leak_detector_finds_every_form(tmp_path: Path) -> None:
    """Positive control: the probes find a planted canary in each form, a fragment of the long
    one as a single overflow page would hold it, an unsalted hash and a raw embedding."""
    c = Canaries()
    detector = c.detector()
    planted = tmp_path / "plant"
    for form in forms(c.short):
        planted.write_bytes(b"\x00junk" + form + b"junk")
        assert detector.files([planted]) == {str(planted): ["short value"]}
    for offset in (0, 1234, 50_001, LONG_VALUE_CHARS - 1000):
        planted.write_bytes(c.long[offset : offset + 1000].encode())
        assert detector.files([planted]) == {str(planted): ["long value"]}
    planted.write_bytes(hashlib.sha256(c.key.encode()).hexdigest().encode())
    assert detector.files([planted]) == {str(planted): ["unsalted hash of key"]}
    vector = HashingEmbedder().embed([c.short_record_text()])[0].tobytes()
    planted.write_bytes(bytes(5000) + vector + bytes(5000))
    assert detector.files([planted]) == {str(planted): ["embedding of the short record"]}
    planted.write_bytes(bytes(1 << 20))  # zeroed pages never match
    assert detector.files([planted]) == {}


# -- S1 -------------------------------------------------------------------------------------
@PURGE
def test_no_canary_reaches_any_file_before_after_forgetting_and_after_close(
    store_factory: StoreFactory, purge: bool
) -> None:
    store = store_factory(purge=purge)
    c = Canaries()
    detector = c.detector()
    c.populate(store)
    got = store.read(c.session_scope, c.key)
    assert got is not None and got.value["note"] == c.short  # the data is really there
    got = store.read(c.session_scope, c.key2)
    assert got is not None and got.value == c.long

    files = store_factory.files(store)
    names = {p.name for p in files}
    assert "cenotaph.db" in names
    assert any(p.parent.name == "keyring" for p in files)
    assert detector.files(files) == {}, "plaintext before forgetting"

    c.forget_all(store)
    assert store.list(f"tenant:{c.tenant}", include_descendants=True) == []
    assert detector.files(store_factory.files(store)) == {}, "plaintext after forgetting"

    store.close()
    assert detector.files(store_factory.files(store)) == {}, "plaintext after close"


def test_a_wal_file_is_scanned_too(store_factory: StoreFactory) -> None:
    """The scan is not vacuous: while the store is open, the -wal file exists and holds its writes."""
    store = store_factory()
    Canaries().populate(store)
    files = store_factory.files(store)
    wal = [p for p in files if p.name.endswith("-wal")]
    assert wal and wal[0].stat().st_size > 0


# -- W4 -------------------------------------------------------------------------------------
@PURGE
def test_no_table_holds_a_raw_name_value_or_unsalted_hash(store_factory: StoreFactory, purge: bool) -> None:
    store = store_factory(purge=purge)
    c = Canaries()
    detector = c.detector()
    c.populate(store)
    store.reauthorize(c.user_scope, c.key)
    store.reauthorize(c.user_scope, subject=c.idp)
    with store_factory.raw(store) as db:
        assert table_leaks(db, detector) == {}
    c.forget_all(store)
    store.write(c.user_scope, c.key2, "again", reauthorization=store.reauthorize(c.user_scope))
    with store_factory.raw(store) as db:
        assert table_leaks(db, detector) == {}
        kinds = {r[0] for r in db.execute("SELECT DISTINCT kind FROM tombstones")}
        assert len(kinds) >= 3  # key, scope and subject tombstones were all inspected


def _targets(factory: StoreFactory, names: Canaries) -> set[bytes]:
    store = factory()
    names.populate(store)
    names.forget_all(store)
    with factory.raw(store) as db:
        rows = db.execute("SELECT target FROM tombstones").fetchall()
        erasures = db.execute("SELECT target FROM erasures").fetchall()
    targets = {bytes(r[0]) for r in rows}
    assert rows and all(len(bytes(r[0])) == 32 for r in rows), "tombstone targets are HMAC-SHA256 tokens"
    assert erasures and all(len(bytes(r[0])) == 32 for r in erasures)
    return targets


def test_tombstone_targets_are_32_byte_tokens_that_differ_between_stores(store_factory: StoreFactory) -> None:
    same_names = Canaries()
    first = _targets(store_factory, same_names)
    second = _targets(store_factory, same_names)
    assert len(first) == len(second) >= 5
    assert first.isdisjoint(second), "two stores produced the same token for the same name"


# -- S2 -------------------------------------------------------------------------------------
def _key_columns(db: sqlite3.Connection, record_id: str) -> tuple[object, object]:
    """(records.wrapped, lineage.wrapped) of a record; a purged row counts as NULL."""
    rec = db.execute("SELECT wrapped FROM records WHERE id=?", (record_id,)).fetchone()
    lin = db.execute("SELECT wrapped FROM lineage WHERE record_id=?", (record_id,)).fetchone()
    return (None if rec is None else rec[0], None if lin is None else lin[0])


def _scope_token(db: sqlite3.Connection, record_id: str) -> bytes:
    row = db.execute("SELECT scope_token FROM lineage WHERE record_id=?", (record_id,)).fetchone()
    assert row is not None
    return bytes(row[0])


def _subject_tokens(db: sqlite3.Connection, record_id: str) -> set[bytes]:
    rows = db.execute("SELECT subject_token FROM record_subjects WHERE record_id=?", (record_id,))
    return {bytes(r[0]) for r in rows}


def _wrapped_of(db: sqlite3.Connection, table: str, token: bytes) -> object:
    row = db.execute(f"SELECT wrapped FROM {table} WHERE token=?", (token,)).fetchone()
    return None if row is None else row[0]


@PURGE
def test_a_key_forget_destroys_the_record_and_lineage_keys(store_factory: StoreFactory, purge: bool) -> None:
    store = store_factory(purge=purge)
    gone = store.write(U, "k", "secret")
    child = store.write(S1, "k", "secret too")
    kept = store.write(U, "other", "kept")
    with store_factory.raw(store) as db:
        assert all(w is not None for w in _key_columns(db, gone.id))

    store.forget(U, "k")
    store = store_factory.reopen(store)

    assert store.get(gone.id) is None and store.get(child.id) is None
    assert store.get(kept.id) == kept
    with store_factory.raw(store) as db:
        for rec in (gone, child):
            assert _key_columns(db, rec.id) == (None, None)
        assert all(w is not None for w in _key_columns(db, kept.id))


@PURGE
def test_a_scope_forget_destroys_the_subtree_scope_keys(store_factory: StoreFactory, purge: bool) -> None:
    store = store_factory(purge=purge)
    above = store.write(T, "k", "tenant")
    inside = [store.write(U, "k", "u"), store.write(S1, "k2", "s1")]
    sibling = store.write(V, "k", "v")
    with store_factory.raw(store) as db:
        destroyed = [_scope_token(db, rec.id) for rec in inside]
        kept = [_scope_token(db, rec.id) for rec in (above, sibling)]
        assert all(_wrapped_of(db, "scopes", t) is not None for t in destroyed + kept)

    store.forget(U)
    store = store_factory.reopen(store)

    for rec in inside:
        assert store.get(rec.id) is None
    assert store.get(above.id) == above and store.get(sibling.id) == sibling
    with store_factory.raw(store) as db:
        for rec in inside:
            assert _key_columns(db, rec.id) == (None, None)
        for token in destroyed:
            assert _wrapped_of(db, "scopes", token) is None
        for token in kept:
            assert _wrapped_of(db, "scopes", token) is not None


@PURGE
def test_a_subject_forget_destroys_the_subject_key(store_factory: StoreFactory, purge: bool) -> None:
    store = store_factory(purge=purge)
    about = store.write(U, "k", "about idp:s", subjects=["idp:s"])
    control = store.write(U, "j", "only the default subject")
    with store_factory.raw(store) as db:
        (subject_token,) = _subject_tokens(db, about.id) - _subject_tokens(db, control.id)
        default_token = next(iter(_subject_tokens(db, control.id)))
        assert _wrapped_of(db, "subjects", subject_token) is not None

    store.forget_subject("idp:s")
    store = store_factory.reopen(store)

    assert store.get(about.id) is None
    assert store.get(control.id) == control
    with store_factory.raw(store) as db:
        assert _key_columns(db, about.id) == (None, None)
        assert _wrapped_of(db, "subjects", subject_token) is None
        assert _wrapped_of(db, "subjects", default_token) is not None


_RECORD_KEY_COLS = ("wrapped", "epoch", "ciphertext", "hidden_version")
_LINEAGE_KEY_COLS = ("wrapped", "epoch", "subjects", "destroyed_version")


def _save_rows(db: sqlite3.Connection, record_id: str) -> tuple[tuple[object, ...], tuple[object, ...]]:
    rec = db.execute(f"SELECT {', '.join(_RECORD_KEY_COLS)} FROM records WHERE id=?", (record_id,)).fetchone()
    lin = db.execute(
        f"SELECT {', '.join(_LINEAGE_KEY_COLS)} FROM lineage WHERE record_id=?", (record_id,)
    ).fetchone()
    assert rec is not None and lin is not None
    return tuple(rec), tuple(lin)


def _restore_rows(db: sqlite3.Connection, record_id: str, saved: tuple[tuple[object, ...], ...]) -> None:
    """Put back a record's own key material from an old copy, as a stale backup would."""
    rec, lin = saved
    db.execute(
        f"UPDATE records SET {', '.join(c + '=?' for c in _RECORD_KEY_COLS)}, hidden_mode=NULL WHERE id=?",
        (*rec, record_id),
    )
    db.execute(
        f"UPDATE lineage SET {', '.join(c + '=?' for c in _LINEAGE_KEY_COLS)} WHERE record_id=?",
        (*lin, record_id),
    )


@pytest.mark.parametrize("destroyed", ["scope", "subject", "source lineage"])
def test_destroying_any_one_key_shreds_the_record(store_factory: StoreFactory, destroyed: str) -> None:
    """S2/W3: even with its own keys put back from an old copy, a record whose scope key,
    subject key or source's lineage key was destroyed cannot be decrypted."""
    store = store_factory()
    source = store.write(V, "src", "source")
    victim = store.write(S1, "k", "victim", subjects=["idp:s"], derived_from=[source.id])
    with store_factory.raw(store) as db:
        saved = _save_rows(db, victim.id)

    if destroyed == "scope":
        store.forget(U)
    elif destroyed == "subject":
        store.forget_subject("idp:s")
    else:
        store.forget(V, "src")
    assert store.get(victim.id) is None
    store.close()

    with store_factory.raw(store) as db:
        _restore_rows(db, victim.id, saved)
        if destroyed != "source lineage":
            assert db.execute("SELECT wrapped FROM lineage WHERE record_id=?", (source.id,)).fetchone()[0]

    store = store_factory.reopen(store)
    assert store.get(victim.id) is None
    assert store.read(S1, "k") is None
    assert victim.id not in {r.id for r in store.list(T, include_descendants=True)}


def test_the_row_restore_itself_works_so_the_test_above_is_sound(store_factory: StoreFactory) -> None:
    """Control: blank a record's own key columns (no forget), put them back, and it reads again."""
    store = store_factory()
    victim = store.write(S1, "k", "victim", subjects=["idp:s"])
    with store_factory.raw(store) as db:
        saved = _save_rows(db, victim.id)
    store.close()
    with store_factory.raw(store) as db:
        db.execute("UPDATE records SET wrapped=NULL, ciphertext=NULL WHERE id=?", (victim.id,))
        db.execute("UPDATE lineage SET wrapped=NULL WHERE record_id=?", (victim.id,))
    store = store_factory.reopen(store)
    assert store.get(victim.id) is None
    store.close()
    with store_factory.raw(store) as db:
        _restore_rows(db, victim.id, saved)
    store = store_factory.reopen(store)
    got = store.get(victim.id)
    assert got is not None and got.value == "victim"
