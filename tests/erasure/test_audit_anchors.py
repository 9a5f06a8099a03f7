"""S7 against someone who can edit the database file but not the key provider's ledger.

The audit log lives in the database; its heads are anchored in the ledger after each transaction
commits. These tests rewrite the database between two opens (the store closed, so this process
holds no SQLite locks) and check that ``verify_audit`` notices, and that the anchoring itself
never turns committed work into an error.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from tests.kit.proc import run, spawn
from tests.kit.stores import StoreFactory

import cenotaph
from cenotaph.audit.chain import chain_entry, entry_to_dict
from cenotaph.errors import KeyProviderError, StorageError

SCOPE = "tenant:acme/user:alice"


def _edit(directory: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    conn = sqlite3.connect(directory / "cenotaph.db")
    try:
        for sql, args in statements:
            conn.execute(sql, args)
        conn.commit()
    finally:
        conn.close()


def _fail_anchors(monkeypatch: pytest.MonkeyPatch, store: cenotaph.Store) -> None:
    """Until ``monkeypatch.undo()``: every anchor append (after COMMIT) fails, as a full ledger
    or a crash right after COMMIT would make it; everything else reaches the ledger."""
    provider = store._provider
    real_append = provider.append_ledger

    def no_anchors(entry: dict[str, object]) -> None:
        if entry.get("kind") == "anchor":
            raise KeyProviderError("the key provider's ledger is full")
        real_append(entry)

    monkeypatch.setattr(provider, "append_ledger", no_anchors)


def _forged_entry() -> str:
    entry = chain_entry("0" * 64, 1, "2020-01-01T00:00:00Z", "forget", {"request_id": "fake"})
    return json.dumps(entry_to_dict(entry), sort_keys=True)


def _two_forgets(directory: Path) -> None:
    with cenotaph.open(directory, auto_purge="off") as store:
        store.write(SCOPE, "k1", 1)
        store.write(SCOPE, "k2", 2)
        store.forget(SCOPE, "k1")
        store.forget(SCOPE, "k2")
        assert store.verify_audit()["anchored_seq"] == 2


@pytest.mark.sqlite_only
@pytest.mark.parametrize("forge", ["truncate", "rewrite"])
def test_deleting_erasure_rows_does_not_launder_a_rewritten_log(tmp_path: Path, forge: str) -> None:
    """Deleting the forgets' request rows makes the store replay them on open; the replay must not
    make the real anchors of the original entries go away."""
    _two_forgets(tmp_path)
    edits: list[tuple[str, tuple[object, ...]]] = [("DELETE FROM erasures", ()), ("DELETE FROM audit", ())]
    if forge == "rewrite":
        edits.append(("INSERT INTO audit VALUES (1, ?)", (_forged_entry(),)))
    _edit(tmp_path, *edits)
    with cenotaph.open(tmp_path, auto_purge="off") as store:
        assert store.read(SCOPE, "k1") is None  # the replay itself still forgets
        with pytest.raises(StorageError, match="altered"):
            store.verify_audit()


@pytest.mark.sqlite_only
def test_a_missing_chain_id_on_a_database_with_an_audit_log_is_refused(tmp_path: Path) -> None:
    """Minting a fresh chain id would orphan every anchor and let any log verify."""
    _two_forgets(tmp_path)
    _edit(
        tmp_path,
        ("DELETE FROM meta WHERE name='audit_chain'", ()),
        ("DELETE FROM audit", ()),
        ("INSERT INTO audit VALUES (1, ?)", (_forged_entry(),)),
    )
    with pytest.raises(StorageError, match="audit chain id is missing"):
        cenotaph.open(tmp_path, auto_purge="off")


def test_a_failing_ledger_after_commit_leaves_the_forget_done_and_forgotten(
    store_factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The anchor is appended after COMMIT (a forget's, later still: by the background worker or
    the next audit check): if that append fails, the forget has still happened, returns, and is
    not served from memory; the entry is merely unanchored."""
    store = store_factory()
    store.write(SCOPE, "k", "secret")
    assert store.read(SCOPE, "k") is not None  # cached
    _fail_anchors(monkeypatch, store)
    request = store.forget(SCOPE, "k", mode="compliance")
    assert store.read(SCOPE, "k") is None
    assert store.erasure(request.id).version == request.version
    audit = store.verify_audit()  # its anchor fails here: unanchored, not contradicted
    assert audit["entries"] == 1 and audit["anchored_seq"] == 0
    monkeypatch.undo()
    store.write(SCOPE, "other", 1)
    store.forget(SCOPE, "other")  # the next anchor covers the unanchored entry
    assert store.verify_audit()["anchored_seq"] == 2


def test_verify_audit_replays_another_processes_crashed_forget_first(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.write(SCOPE, "k", 1)
    assert store.verify_audit()["entries"] == 0
    # killed after its ledger append, before COMMIT
    child = run(
        "forget",
        fault="forget.ledgered",
        location=store_factory.location(store).to_json(),
        scope=SCOPE,
        key="k",
        close=False,
    )
    assert child.killed, child.stderr
    audit = store.verify_audit()  # no read in between: verify_audit syncs itself
    assert audit["entries"] == 1  # the replay's entry (replays are not anchored)
    assert store.read(SCOPE, "k") is None


@pytest.mark.sqlite_only
def test_a_stale_copy_on_the_same_keyring_does_not_fork_the_sources_anchors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening an old copy of the database (not a restore) on the same keyring replays the forgets
    it lacks; those replays are not anchored, so the source's audit log still verifies."""
    source, copy = tmp_path / "source", tmp_path / "copy"
    monkeypatch.setenv("CENOTAPH_KEYRING", str(tmp_path / "keyring"))
    with cenotaph.open(source, auto_purge="off") as store:
        store.write(SCOPE, "k1", 1)
        store.write(SCOPE, "k2", 2)
        store.forget(SCOPE, "k1")
    copy.mkdir()
    (copy / "cenotaph.db").write_bytes((source / "cenotaph.db").read_bytes())  # closed: no WAL left
    with cenotaph.open(source, auto_purge="off") as store:
        store.forget(SCOPE, "k2")
    with cenotaph.open(copy, auto_purge="off") as stale:
        assert stale.read(SCOPE, "k2") is None  # the ledger still protects the copy
    with cenotaph.open(source, auto_purge="off") as store:
        assert store.verify_audit()["entries"] == 2


def _crashed_forget(directory: Path) -> None:
    """A forget killed after its ledger append and before COMMIT (replayed at the next open)."""
    child = run("forget", fault="forget.ledgered", location=str(directory), scope=SCOPE, key="k", close=False)
    assert child.killed, child.stderr


@pytest.mark.sqlite_only
@pytest.mark.parametrize("forge", ["delete", "mode", "version", "records"])
def test_an_unanchored_replayed_forget_is_still_pinned_by_the_ledger(tmp_path: Path, forge: str) -> None:
    """A replayed forget's audit entry is not anchored; the ledger's forget entry pins it."""
    with cenotaph.open(tmp_path, auto_purge="off") as store:
        store.write(SCOPE, "k", 1)
    _crashed_forget(tmp_path)
    with cenotaph.open(tmp_path, auto_purge="off") as store:  # replays it
        assert store.verify_audit()["entries"] == 1
    if forge == "delete":
        _edit(tmp_path, ("DELETE FROM audit", ()))
    else:
        conn = sqlite3.connect(tmp_path / "cenotaph.db")
        doc = json.loads(conn.execute("SELECT entry FROM audit").fetchone()[0])
        conn.close()
        fields = doc["fields"]
        if forge == "mode":
            fields["mode"] = "operational" if fields["mode"] == "compliance" else "compliance"
        else:
            fields[forge] += 1000
        entry = chain_entry("0" * 64, 1, doc["at"], "forget", doc["fields"])
        _edit(
            tmp_path,
            ("UPDATE audit SET entry=? WHERE seq=1", (json.dumps(entry_to_dict(entry), sort_keys=True),)),
        )
    with cenotaph.open(tmp_path, auto_purge="off") as store, pytest.raises(StorageError, match="misstates"):
        store.verify_audit()


@pytest.mark.sqlite_only
def test_wiping_the_chain_id_and_the_whole_log_is_refused(tmp_path: Path) -> None:
    """With no audit rows left, the ledger still knows this keyring has history."""
    _two_forgets(tmp_path)
    _edit(tmp_path, ("DELETE FROM meta WHERE name='audit_chain'", ()), ("DELETE FROM audit", ()))
    with pytest.raises(StorageError, match="already has history"):
        cenotaph.open(tmp_path, auto_purge="off")


def _entries(directory: Path) -> list[dict[str, object]]:
    conn = sqlite3.connect(directory / "cenotaph.db")
    try:
        return [json.loads(e) for (e,) in conn.execute("SELECT entry FROM audit ORDER BY seq")]
    finally:
        conn.close()


def _append_forged(directory: Path, events: list[tuple[str, dict[str, object]]]) -> None:
    """Append well-formed, correctly chained entries: what someone who can write only the
    database can do without breaking the hash chain."""
    entries = _entries(directory)
    seq, head = int(entries[-1]["seq"]), str(entries[-1]["head"])  # type: ignore[call-overload]
    rows = []
    for event, fields in events:
        seq += 1
        entry = chain_entry(head, seq, "2026-11-30T00:00:00Z", event, fields)
        head = entry.head
        rows.append(
            ("INSERT INTO audit VALUES (?, ?)", (seq, json.dumps(entry_to_dict(entry), sort_keys=True)))
        )
    _edit(directory, *rows)


def _verify_fails(directory: Path, match: str) -> None:
    with cenotaph.open(directory, auto_purge="off") as store, pytest.raises(StorageError, match=match):
        store.verify_audit()


FORGED_TAILS = {
    "a purge and a rotation": [("purge", {"request_count": 0}), ("rotate", {"epoch": 9, "rewrapped": 0})],
    "a verify saying verified": [
        ("verify", {"request_id": "er_x", "verified": True, "matches": 0, "probes": 9})
    ],
    "a forget": [("forget", {"request_id": "er_fake", "mode": "compliance", "replayed": False})],
    "a replayed forget": [("forget", {"request_id": "er_fake", "mode": "compliance", "replayed": True})],
}


@pytest.mark.sqlite_only
@pytest.mark.parametrize("events", FORGED_TAILS.values(), ids=FORGED_TAILS.keys())
def test_entries_appended_past_the_newest_anchor_are_detected(
    tmp_path: Path, events: list[tuple[str, dict[str, object]]]
) -> None:
    """No crash, every entry anchored; then correctly chained entries are appended in the
    database. They were never announced to the key provider: verify_audit must say so."""
    _two_forgets(tmp_path)
    _append_forged(tmp_path, events)
    _verify_fails(tmp_path, "never announced|never recorded")


@pytest.mark.sqlite_only
def test_an_entry_whose_anchor_was_lost_is_vouched_for_and_still_cannot_be_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The anchor after COMMIT fails (a crash there, a full ledger): the entry's intent, written
    before COMMIT, still vouches for it, so verify passes; rewriting that entry is detected."""
    with cenotaph.open(tmp_path, auto_purge="off") as store:
        store.write(SCOPE, "k", "secret")
        request = store.forget(SCOPE, "k")
        _fail_anchors(monkeypatch, store)
        store.purge()  # verify and purge entries: announced, not anchored
        monkeypatch.undo()
        audit = store.verify_audit()
        assert audit["anchored_seq"] == 1 and audit["entries"] == 3
        assert request.status().state == "verified"
    entries = _entries(tmp_path)
    _edit(tmp_path, ("DELETE FROM audit WHERE seq > 1", ()))
    _append_forged(tmp_path, [(str(e["event"]), {**e["fields"], "matches": 0}) for e in entries[1:]])  # type: ignore[dict-item]
    _verify_fails(tmp_path, "never announced")


@pytest.mark.sqlite_only
def test_a_database_that_says_verified_without_a_verify_entry_is_not_attested(tmp_path: Path) -> None:
    """The request's row is set to verified in the database; no scan ever said so in the audit
    log, so attest must refuse to sign it."""
    with cenotaph.open(tmp_path, auto_purge="off") as store:
        store.write(SCOPE, "k", "secret")
        request = store.forget(SCOPE, "k")
    verified_layers = json.dumps(
        {n: {"state": "done", "evidence": {}} for n in ("tombstone", "keys", "rows", "wal", "index", "scan")}
    )
    _edit(
        tmp_path,
        (
            "UPDATE erasures SET state='verified', verified_at='2026-01-01T00:00:00Z', layers=? WHERE id=?",
            (verified_layers, request.id),
        ),
    )
    with cenotaph.open(tmp_path, auto_purge="off") as store, pytest.raises(StorageError, match="scan"):
        store.attest(request.id)


def _honest_verified_forget(directory: Path) -> str:
    with cenotaph.open(directory, auto_purge="sync") as store:
        store.write(SCOPE, "k", "secret")
        request = store.forget(SCOPE, "k")
        assert request.status().state == "verified"
        return request.id


@pytest.mark.sqlite_only
def test_a_request_planted_in_the_database_is_never_ledgered_nor_certified(tmp_path: Path) -> None:
    """A request row someone wrote into the database (no forget ledgered it) used to be copied
    into the ledger on open, then purged, verified and certified like a real one."""
    honest = _honest_verified_forget(tmp_path)
    planted = "er_" + "f" * 24
    _edit(
        tmp_path,
        (
            "INSERT INTO erasures SELECT ?, mode, target_kind, target, version, requested_at, 'shredded', "
            "layers, plan, probes, NULL, NULL, NULL, NULL FROM erasures WHERE id=?",
            (planted, honest),
        ),
    )
    with cenotaph.open(tmp_path) as store:
        assert planted not in {e.get("request_id") for e in store._provider.ledger()}
        store.purge()
        with pytest.raises(StorageError, match="not in the key provider's ledger"):
            store.attest(planted)
        store.attest(honest)  # the real one still is


@pytest.mark.sqlite_only
def test_a_certificate_states_the_ledger_and_the_audited_scan_not_the_row(tmp_path: Path) -> None:
    honest = _honest_verified_forget(tmp_path)
    with cenotaph.open(tmp_path) as store:
        before = json.loads(store.attest(honest).to_json())
    _edit(
        tmp_path,
        (
            "UPDATE erasures SET target=?, version=1002, requested_at='2020-01-01T00:00:00+00:00', "
            "verified_at='2020-01-02T00:00:00+00:00', scan=?, "
            "plan=json_set(plan, '$.epochs', json('[]')) WHERE id=?",
            (b"\xee" * 32, json.dumps({"files": 42, "bytes": 10**9, "probes": 999, "matches": 0}), honest),
        ),
    )
    with cenotaph.open(tmp_path) as store:
        after = json.loads(store.attest(honest).to_json())
    # the row's plan now claims no epoch wrapped its keys: the horizon must not follow it
    for field in ("target", "forget_version", "requested_at", "verified_at", "scan", "horizon"):
        assert after[field] == before[field], field


def test_verify_audit_raises_no_false_alarm_while_another_process_works(store_factory: StoreFactory) -> None:
    """The log and the ledger are read under the write lock, so another process can never be
    between its ledger append and its COMMIT: an honest neighbour is never reported as tampering
    (reading them apart once flagged ~1 check in 20)."""
    first = store_factory()
    first.write(SCOPE, "k0", "v")
    first.close()
    location = store_factory.location(first).to_json()
    checks, alarms = 0, []
    with spawn("churn", location=location, scope="tenant:acme/user:alice", seconds=4) as worker:
        store = store_factory.reopen(first)
        while worker.alive:
            checks += 1
            try:
                store.verify_audit()
            except StorageError as exc:
                alarms.append(str(exc)[:80])
        assert worker.finish() == 0, worker.stderr
        assert store.verify_audit()["entries"] > 10  # the worker really worked
    assert checks > 20 and alarms == [], alarms[:3]
