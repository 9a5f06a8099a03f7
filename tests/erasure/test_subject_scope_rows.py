"""A subject erasure removes what only the erased subject used: its scopes' rows and other subjects.

Before, after ``forget_subject("tenant:acme/user:alice")`` and its purge, the rows of alice's
scopes stayed (token, parent link, live wrapped scope key, one per session), and so did the row
of a subject only her records carried: whoever holds the erasure secret could confirm guessed
scope names and count her sessions. A scope forget likewise listed every scope of its subtree in
its plan (the request row and the key provider's ledger), and left the subject of the forgotten
records behind.

Checked on real SQLite files, with the keyring outside the data directory: the scopes and
subjects tables hold no row of alice's (scopes shared with bob, and bob's own, are untouched and
readable); no file of the data directory or of the keyring holds the token of any of her scope
names, raw or hex (the byte oracle finds the tokens that must stay, such as her subject's
tombstone, so it would find these); writes after a reauthorization work, in a scope whose rows
were removed and in one written again before the purge; a restored copy replaying the erasure
removes the same rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.kit.oracle import residue, sql

import cenotaph
from cenotaph.crypto.tokens import TokenMaker
from cenotaph.scope import Scope

# about SQLite's files and rows (tests/kit/stores.py)
pytestmark = pytest.mark.sqlite_only

ALICE = "tenant:acme/user:alice"
BOB = "tenant:acme/user:bob"
TEAM = "tenant:acme/team:x"  # shared: a record of alice's and one of bob's
PROJECT = "tenant:acme/project:p1"  # alice's only (no user segment; she is its only subject)
IDP = "idp:alice-7f3a"  # a subject the caller added to alice's records only
ALICE_SCOPES = [ALICE, f"{ALICE}/session:s1", f"{ALICE}/session:s2", f"{ALICE}/session:s3", PROJECT]
KEPT_SCOPES = ["tenant:acme", TEAM, BOB, f"{BOB}/session:b1"]


def _open(root: Path, **options: bool | str) -> cenotaph.Store:
    # forgets purge before they return unless a test says otherwise (these tests are about what
    # a purge concludes, not about when it runs)
    options.setdefault("auto_purge", "sync")
    return cenotaph.open(root / "data", key_provider=cenotaph.LocalKeyring(root / "keyring"), **options)  # type: ignore[arg-type]


def _populate(store: cenotaph.Store) -> dict[str, str]:
    """Alice in three sessions, her user scope, a project only she used and a team scope shared
    with bob; bob in his session and the team scope, with a summary derived from alice's note."""
    ids = {}
    for n in (1, 2, 3):
        ids[f"s{n}"] = store.write(f"{ALICE}/session:s{n}", "note", f"alice's note {n}").id
    ids["profile"] = store.write(ALICE, "profile", "alice's profile", subjects=[IDP]).id
    store.write(PROJECT, "plan", "alice's plan", subjects=[ALICE])
    store.write(TEAM, "alice", "alice's team note", subjects=[ALICE])
    ids["team-bob"] = store.write(TEAM, "bob", "bob's team note", subjects=[BOB]).id
    ids["bob"] = store.write(f"{BOB}/session:b1", "note", "bob's note").id
    store.write(f"{BOB}/session:b1", "summary", "bob's summary of alice", derived_from=[ids["s1"]])
    return ids


def _tokens(root: Path) -> TokenMaker:
    return TokenMaker(cenotaph.LocalKeyring(root / "keyring").erasure_secret())


def _scope_tokens(root: Path, paths: list[str]) -> list[bytes]:
    tokens = _tokens(root)
    return [tokens.scope(Scope.parse(p)) for p in paths]


def _rows(db: Path, table: str) -> set[bytes]:
    return {bytes(r[0]) for r in sql(db, f"SELECT token FROM {table}")}


def _leaks(root: Path, tokens: list[bytes]) -> list[object]:
    """Every place in the data directory or the keyring where one of ``tokens`` is, raw or hex."""
    hits: list[object] = []
    for where in (root / "data", root / "keyring"):
        found = residue(where, texts=[t.hex() for t in tokens], blobs=tokens)
        hits += found["text_hits"] + found["window_hits"]
    return hits


def test_a_subject_erasure_removes_the_rows_only_the_subject_used(tmp_path: Path) -> None:
    db = tmp_path / "data" / "cenotaph.db"
    with _open(tmp_path) as store:
        ids = _populate(store)
        assert set(_scope_tokens(tmp_path, ALICE_SCOPES)) <= _rows(db, "scopes")  # there before
        request = store.forget_subject(ALICE)
        assert request.status().state == "verified", request.status().gaps
        assert store.read(f"{BOB}/session:b1", "note") is not None
        assert store.read(TEAM, "bob") is not None
        assert store.read(f"{BOB}/session:b1", "summary") is None  # derived from alice: gone with her
        assert store.get(ids["team-bob"]) is not None
    tokens = _tokens(tmp_path)
    scopes = _rows(db, "scopes")
    assert not set(_scope_tokens(tmp_path, ALICE_SCOPES)) & scopes, "a scope only alice used kept its row"
    assert set(_scope_tokens(tmp_path, KEPT_SCOPES)) <= scopes
    live = {bytes(r[0]) for r in sql(db, "SELECT token FROM scopes WHERE wrapped IS NOT NULL")}
    assert set(_scope_tokens(tmp_path, KEPT_SCOPES)) <= live, "a shared scope lost its key"
    subjects = _rows(db, "subjects")
    assert tokens.subject(ALICE) not in subjects and tokens.subject(IDP) not in subjects
    assert tokens.subject(BOB) in subjects

    # a guessed name confirms nothing: none of her scope tokens (nor the subject only she
    # carried) is in any file of the store or the keyring -- while the tokens that must stay
    # (her subject's tombstone, bob's scope) are found by the same oracle
    assert _leaks(tmp_path, [*_scope_tokens(tmp_path, ALICE_SCOPES), tokens.subject(IDP)]) == []
    assert _leaks(tmp_path, [tokens.subject(ALICE)]) and _leaks(tmp_path, _scope_tokens(tmp_path, [BOB]))


def test_writes_after_a_reauthorization_work_and_a_second_erasure_removes_them_again(tmp_path: Path) -> None:
    db = tmp_path / "data" / "cenotaph.db"
    session = f"{ALICE}/session:s1"
    with _open(tmp_path) as store:
        _populate(store)
        store.forget_subject(ALICE)
        token = store.reauthorize(session, subject=ALICE)
        record = store.write(session, "new", "alice is back", reauthorization=token)
        assert store.read(session, "new") is not None and store.get(record.id) is not None
        store.write(f"{ALICE}/session:s9", "more", "no token needed once lifted")
        assert store.read(f"{ALICE}/session:s9", "more") is not None
        assert set(_scope_tokens(tmp_path, [ALICE, session])) <= _rows(db, "scopes")
        again = store.forget_subject(ALICE)
        assert again.status().state == "verified", again.status().gaps
        assert store.read(f"{BOB}/session:b1", "note") is not None
    assert not set(_scope_tokens(tmp_path, [*ALICE_SCOPES, f"{ALICE}/session:s9"])) & _rows(db, "scopes")


def test_a_scope_written_again_after_a_lift_before_the_purge_keeps_its_row(tmp_path: Path) -> None:
    db = tmp_path / "data" / "cenotaph.db"
    session = f"{ALICE}/session:s1"
    with _open(tmp_path, auto_purge="off") as store:
        _populate(store)
        request = store.forget_subject(ALICE)
        token = store.reauthorize(session, subject=ALICE)
        store.write(session, "new", "written between the forget and its purge", reauthorization=token)
        assert store.purge().requests[request.id] == "verified", request.status().gaps
        assert store.read(session, "new") is not None
        store.write(session, "later", "still writable")
        assert store.read(session, "later") is not None
    scopes = _rows(db, "scopes")
    assert set(_scope_tokens(tmp_path, [ALICE, session])) <= scopes  # in use again: kept
    assert not set(_scope_tokens(tmp_path, [f"{ALICE}/session:s2", f"{ALICE}/session:s3", PROJECT])) & scopes


def test_a_scope_forget_lists_no_scope_of_its_subtree_and_removes_the_subject_only_it_held(
    tmp_path: Path,
) -> None:
    db = tmp_path / "data" / "cenotaph.db"
    bob_scopes = [BOB, f"{BOB}/session:b1"]
    with _open(tmp_path) as store:
        store.write(f"{BOB}/session:b1", "note", "bob's note")
        store.write(f"{BOB}/session:b2", "note", "bob's other note")
        store.write(f"{ALICE}/session:s1", "note", "alice's note")
        request = store.forget(BOB)
        assert request.status().state == "verified", request.status().gaps
        assert store.read(f"{ALICE}/session:s1", "note") is not None
    tokens = _tokens(tmp_path)
    assert not set(_scope_tokens(tmp_path, bob_scopes)) & _rows(db, "scopes")
    assert tokens.subject(BOB) not in _rows(db, "subjects") and tokens.subject(ALICE) in _rows(db, "subjects")
    # the sessions of the forgotten subtree are named nowhere (its root is the tombstone's target)
    sessions = _scope_tokens(tmp_path, [f"{BOB}/session:b1", f"{BOB}/session:b2"])
    assert _leaks(tmp_path, [*sessions, tokens.subject(BOB)]) == []
    assert _leaks(tmp_path, _scope_tokens(tmp_path, [BOB]))  # the tombstone's target stays


@pytest.mark.parametrize("purged_first", [False, True])
def test_a_restored_copy_replaying_the_erasure_removes_the_same_rows(
    tmp_path: Path, purged_first: bool
) -> None:
    with _open(tmp_path) as store:
        _populate(store)
        info = store.backup(tmp_path / "backup")  # holds all of alice's rows
        store.forget_subject(ALICE)
        if purged_first:
            store.purge()
    restored_db = tmp_path / "restored" / "cenotaph.db"
    with cenotaph.restore(
        info.path, tmp_path / "restored", key_provider=cenotaph.LocalKeyring(tmp_path / "keyring")
    ) as restored:
        assert restored.read(f"{BOB}/session:b1", "note") is not None
        assert restored.read(TEAM, "bob") is not None
        assert restored.read(f"{ALICE}/session:s1", "note") is None
        assert all(r.status().state == "verified" for r in restored.erasures())
    scopes = _rows(restored_db, "scopes")
    assert not set(_scope_tokens(tmp_path, ALICE_SCOPES)) & scopes
    assert set(_scope_tokens(tmp_path, KEPT_SCOPES)) <= scopes
    assert _tokens(tmp_path).subject(IDP) not in _rows(restored_db, "subjects")
