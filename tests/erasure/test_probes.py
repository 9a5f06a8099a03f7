"""S4: the probes a forget samples cover everything it destroys, even past the per-request cap."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tests.kit.stores import StoreFactory

import cenotaph
from cenotaph.erasure.planning import probes as probes_module

SUBJECT = "tenant:t/user:u"


def _wrapped(db: Path, sql: str) -> list[bytes]:
    conn = sqlite3.connect(db)
    try:
        return [bytes(r[0]) for r in conn.execute(sql)]
    finally:
        conn.close()


@pytest.mark.sqlite_only
def test_capped_probes_still_cover_the_last_records_and_the_subject_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap used to keep the first probes in order: with many records, the later records and
    every scope and subject key (sampled last) were never probed."""
    cap = 60
    monkeypatch.setattr(probes_module, "MAX_PROBES_PER_REQUEST", cap)
    with cenotaph.open(tmp_path, auto_purge="off") as store:
        for i in range(80):
            store.write(SUBJECT, f"k{i:03}", f"note {i} " * 20)
        db = tmp_path / "cenotaph.db"
        subject_keys = _wrapped(db, "SELECT wrapped FROM subjects")
        key_of = dict(_pairs(db, "SELECT id, wrapped FROM records"))
        request = store.forget_subject(SUBJECT)
        row = store._erasure.row(request.id)
        with store._backend.read() as txn:
            sample = store._erasure._verifier._open_probes(txn, row)
        assert sample is not None
        sampled = set(sample.probes)
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


CANARY = "cnry-probe-plaintext-5d1e"


@pytest.mark.sqlite_only
def test_probes_in_a_copy_taken_while_pending_die_with_the_horizon(tmp_path: Path) -> None:
    """Probes hold windows of the erased plaintext. They used to be sealed under a key derived
    from the erasure secret, which is never destroyed: a backup taken between the forget and its
    purge decrypted to the erased value after the certificate said the horizon was reached."""
    from cenotaph.erasure.planning.probes import open_probes

    data = tmp_path / "data"
    with cenotaph.open(data, auto_purge="off") as store:
        store.write(SUBJECT, "note", f"{CANARY} {CANARY}")
        request = store.forget_subject(SUBJECT)
        backup = store.backup(tmp_path / "backup")
        assert store.purge().requests[request.id] == "verified"
        store.release_backup(backup.id)
        report = store.rotate_keys()
        certificate = store.attest(request.id)
        assert certificate.to_dict()["horizon"] is not None

        copy = Path(backup.path) / "cenotaph.db"
        ((blob,),) = _rows(copy, "SELECT probes FROM erasures WHERE id=?", (request.id,))
        ((wrapped, epoch),) = _rows(
            copy, "SELECT wrapped, epoch FROM probe_keys WHERE request_id=?", (request.id,)
        )
        assert blob, "the copy was taken while the probes were pending"
        assert epoch in report.destroyed_epochs
        assert store._keys.unwrap(bytes(wrapped), int(epoch)) is None
        secret = store._provider.erasure_secret()
        assert open_probes(secret, request.id, bytes(blob)) is None


def test_a_rotation_keeps_a_pending_requests_probes_until_it_verifies(store_factory: StoreFactory) -> None:
    with store_factory() as store:
        store.write(SUBJECT, "note", CANARY * 2)
        request = store.forget_subject(SUBJECT)
        first = store.rotate_keys()
        assert first.destroyed_epochs == () and first.retained_epochs == (1,)  # it wraps the probe key
        status = store.erasure(request.id).status()
        assert (
            status.horizon is None
            and "pending erasure's probes" in status.layers["horizon"].evidence["reason"]
        )
        assert store.purge().requests[request.id] == "verified"  # the probes still open
        second = store.rotate_keys()
        assert 1 in second.destroyed_epochs
        assert store.erasure(request.id).status().horizon is not None


def _rows(db: Path, query: str, params: tuple[object, ...], *, live: bool = False) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db) if live else sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    try:
        return list(conn.execute(query, params))
    finally:
        conn.close()


@pytest.mark.sqlite_only
def test_a_rotation_starting_inside_a_forget_cannot_take_the_probes_out_of_the_horizon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rotation in another process creates its epoch before its transaction, so it can appear
    between the forget reading the plan's epochs and sealing the probes. The probe key must still
    be wrapped by one of the plan's epochs: the horizon counts only those."""
    import cenotaph.erasure.planning.sampling as store_module

    with cenotaph.open(tmp_path / "data", auto_purge="off") as store:
        store.write(SUBJECT, "note", CANARY * 2)
        real = probes_module.sample_probes  # what store_module.sample_probes is

        def sample_during_a_rotation(*args: Any, **kwargs: Any) -> probes_module.ProbeSample:
            store._provider.new_epoch()  # the other process's rotation, first step
            return real(*args, **kwargs)

        monkeypatch.setattr(store_module, "sample_probes", sample_during_a_rotation)
        request = store.forget_subject(SUBJECT)
        monkeypatch.setattr(store_module, "sample_probes", real)
        plan_epochs = json.loads(store._erasure.row(request.id).plan)["epochs"]
        ((epoch,),) = _rows(tmp_path / "data" / "cenotaph.db", "SELECT epoch FROM probe_keys", (), live=True)
        assert epoch in plan_epochs

        store.rotate_keys()
        assert store.erasure(request.id).status().horizon is None  # pending: its probes' epoch lives
        assert store.purge().requests[request.id] == "verified"
        report = store.rotate_keys()
        assert epoch in report.destroyed_epochs
        assert store.erasure(request.id).status().horizon is not None


@pytest.mark.sqlite_only
def test_a_backup_works_after_the_epoch_of_destroyed_keys_is_gone(tmp_path: Path) -> None:
    """A destroyed key's row keeps its epoch number until purge; counting it as "in use" would
    make a backup after that epoch's destruction fail as if rotations kept racing it (reachable
    only while a request is pending, and then its probe key holds the epoch back)."""
    with cenotaph.open(tmp_path / "data", auto_purge="off") as store:
        store.write(SUBJECT, "note", CANARY * 2)
        store.write("tenant:t/user:other", "note", "kept")
        request = store.forget_subject(SUBJECT)
        assert store.purge().requests[request.id] == "verified"
        assert 1 in store.rotate_keys().destroyed_epochs
        info = store.backup(tmp_path / "backup")
        assert 1 not in info.epochs
