"""W7 under real SIGKILL: what returned survives, what did not return happened completely or not at all.

Every test runs the store in a child process (a scenario of ``tests/kit/scenarios/crash.py``, run
by ``tests.kit.proc``), kills it with SIGKILL (the child's whole process group, so a scan worker it
started dies with it, as in a power cut), and reopens the data directory in this process.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
from pathlib import Path

import pytest
from tests.kit.checks import present
from tests.kit.proc import run, spawn

import cenotaph
from cenotaph.errors import ForgottenError, InvalidValueError

SCOPE = "tenant:crash/user:u/session:s"


def _integrity(directory: Path) -> None:
    conn = sqlite3.connect(directory / "cenotaph.db")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


def _raw_erasure_ids(directory: Path) -> list[str]:
    conn = sqlite3.connect(directory / "cenotaph.db")
    try:
        return [r[0] for r in conn.execute("SELECT id FROM erasures")]
    finally:
        conn.close()


def _raw_record_key(directory: Path, record_id: str) -> bytes | None:
    """The record's wrapped content key as stored (None once destroyed or the row is purged)."""
    conn = sqlite3.connect(directory / "cenotaph.db")
    try:
        row = conn.execute("SELECT wrapped FROM records WHERE id=?", (record_id,)).fetchone()
        return None if row is None else row[0]
    finally:
        conn.close()


def _ledger_ids(directory: Path) -> list[str]:
    path = directory / "keyring" / "ledger.jsonl"
    if not path.exists():
        return []
    ids = []
    for line in path.read_text().splitlines():
        try:
            ids.append(json.loads(line)["request_id"])
        except (ValueError, KeyError):
            continue
    return ids


# -- W7: every write and forget whose return was observed survives SIGKILL ------------------------
def test_sigkill_keeps_every_returned_write_and_forget(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("CENOTAPH_CRASH_SEED", "7")))
    written: dict[tuple[str, str], tuple[int, int]] = {}  # slot -> (version, value)
    forgotten: dict[tuple[str, str], int] = {}  # slot -> v_f
    in_doubt: set[tuple[str, str]] = set()  # forgets that started but were not seen to return
    resolved = {"happened": 0, "did not happen": 0}
    cycles = 5
    for cycle in range(cycles):
        auto_purge = (
            "sync" if cycle % 2 == 1 else "off"
        )  # odd cycles: kills also land inside purges and scans
        with spawn(
            "crash-writer",
            directory=str(tmp_path),
            prefix=f"tenant:c{cycle}",
            seed=cycle,
            auto_purge=auto_purge,
        ) as child:
            child.wait_for("ready")
            kill_after = rng.randint(5, 400)
            child.read_lines(kill_after)
            assert child.alive, "the writer died by itself"
            child.kill()
        assert child.returncode == -signal.SIGKILL
        started: set[tuple[str, str]] = set()
        for line in child.lines:
            kind, *rest = line.split(" ")
            if kind == "w":
                scope, key, printed_version, printed_value = rest
                written[(scope, key)] = (int(printed_version), int(printed_value))
            elif kind == "F":
                started.add((rest[0], rest[1]))
            elif kind == "f":
                slot = (rest[0], rest[1])
                forgotten[slot] = int(rest[2])
                started.discard(slot)
        in_doubt |= started
        _integrity(tmp_path)

        with cenotaph.open(tmp_path, auto_purge="off") as store:
            for (scope, key), (version, value) in written.items():
                if (scope, key) in forgotten or (scope, key) in in_doubt:
                    continue
                record = store.read(scope, key)
                assert record is not None, (
                    f"cycle {cycle}: a returned write was lost: {scope} {key}@{version}"
                )
                assert (record.version, record.value) == (version, value)
            for (scope, key), v_f in forgotten.items():
                assert store.read(scope, key) is None, (
                    f"cycle {cycle}: a returned forget was undone: {scope} {key}"
                )
                with pytest.raises(ForgottenError) as info:
                    store.write(scope, key, "again")
                assert info.value.version == v_f
            for scope, key in sorted(in_doubt):
                # a forget that did not return happened completely or not at all
                record = store.read(scope, key)
                if record is None:
                    with pytest.raises(ForgottenError) as info:
                        store.write(scope, key, "again")
                    forgotten[(scope, key)] = info.value.version
                    resolved["happened"] += 1
                else:
                    resolved["did not happen"] += 1
                    version, value = written[(scope, key)]
                    assert (record.version, record.value) == (version, value)
                    again = store.write(scope, key, 0, base_version=record.version)
                    written[(scope, key)] = (again.version, 0)
            in_doubt.clear()
            report = store.purge()  # resumable after a crash at any step (S3): never raises here
            assert report is not None
        print(
            f"[crash cycle {cycle}] lines={len(child.lines)} writes={len(written)} "
            f"forgets={len(forgotten)} unreturned forgets: {resolved}"
        )
    assert len(written) > cycles * 5
    _integrity(tmp_path)


# -- tombstones and reauthorization tokens survive SIGKILL -----------------------------------------
@pytest.mark.parametrize("mode", ["compliance", "operational"])
def test_sigkill_after_forget_returned(tmp_path: Path, mode: str) -> None:
    with spawn("crash-after-forget", directory=str(tmp_path), scope=SCOPE, mode=mode) as child:
        _, request_id, v_f = child.wait_for("forgot ").split(" ")
        _, v_again, token = child.wait_for("token ").split(" ")
        child.wait_for("returned")
        child.kill()
    assert child.returncode == -signal.SIGKILL

    with cenotaph.open(tmp_path, auto_purge="off") as store:
        assert store.read(SCOPE, "gone") is None
        assert [r.key for r in store.list(SCOPE)] == ["kept"]
        with pytest.raises(ForgottenError) as info:
            store.write(SCOPE, "gone", "resurrected?")
        assert info.value.version == int(v_f)
        request = store.erasure(request_id)
        assert (request.version, request.mode) == (int(v_f), mode)
        assert present(store.read(SCOPE, "kept")).value == "stays"
        # the token was issued (and printed) before the kill: it still works, once
        assert store.read(SCOPE, "again") is None
        record = store.write(SCOPE, "again", "second", reauthorization=token)
        assert record.version > int(v_again)
    with cenotaph.open(tmp_path, auto_purge="off") as store:  # and that write is durable too
        assert present(store.read(SCOPE, "again")).value == "second"
        assert store.read(SCOPE, "gone") is None
    _integrity(tmp_path)


# -- W7: the ledger entry is durable before the commit; a forget that reached it happened -----------
def _seed(directory: Path) -> dict[str, str]:
    with cenotaph.open(directory, auto_purge="off") as store:
        ids = {
            "k": store.write(SCOPE, "k", "secret").id,
            "other": store.write(SCOPE, "other", "same scope").id,
            "sibling": store.write("tenant:crash/user:u/session:t", "k", "sibling scope").id,
        }
    return ids


def _crash_forget(directory: Path, key: str | None, mode: str, when: str) -> tuple[str, int]:
    with spawn(
        "crash-in-forget", directory=str(directory), scope=SCOPE, key=key, mode=mode, when=when
    ) as child:
        child.wait_for("opened")
        _, request_id, version = child.wait_for("plan ").split(" ")
        assert child.finish() == -signal.SIGKILL, child.stderr
        assert "returned" not in child.lines
    return request_id, int(version)


FORGETS = [("k", "compliance"), ("k", "operational"), (None, "compliance"), (None, "operational")]


@pytest.mark.parametrize(("key", "mode"), FORGETS, ids=lambda v: str(v))
def test_forget_in_ledger_but_not_committed_is_applied_on_open(
    tmp_path: Path, key: str | None, mode: str
) -> None:
    ids = _seed(tmp_path)
    request_id, v_f = _crash_forget(tmp_path, key, mode, "after-ledger")
    # the scenario is real: the provider's ledger has the entry, the database does not
    assert request_id in _ledger_ids(tmp_path)
    assert request_id not in _raw_erasure_ids(tmp_path)
    _integrity(tmp_path)

    with cenotaph.open(tmp_path, auto_purge="off") as store:
        assert store.read(SCOPE, "k") is None
        assert store.get(ids["k"]) is None
        with pytest.raises(ForgottenError) as info:
            store.write(SCOPE, "k", "resurrected?")
        assert info.value.version == v_f
        request = store.erasure(request_id)
        assert (request.version, request.mode) == (v_f, mode)
        if key is None:  # a scope forget: everything in the scope, nothing beside it
            assert store.read(SCOPE, "other") is None
            assert store.list(SCOPE) == []
        else:
            assert present(store.read(SCOPE, "other")).value == "same scope"
        assert present(store.read("tenant:crash/user:u/session:t", "k")).value == "sibling scope"
        fresh = store.write(SCOPE, "new", 1) if key is not None else None
        assert fresh is None or fresh.version > v_f
    with cenotaph.open(tmp_path, auto_purge="off") as store:  # replay is idempotent
        assert store.read(SCOPE, "k") is None
        # the dead forget left no anchor behind (anchors follow COMMIT), so the audit log, with
        # the replay's own entry, still verifies (S7)
        assert store.verify_audit()["entries"] >= 1
    assert _raw_erasure_ids(tmp_path).count(request_id) == 1
    if mode == "compliance":  # the replay destroyed the key in the bytes, not only in the API
        assert _raw_record_key(tmp_path, ids["k"]) is None
    else:
        assert _raw_record_key(tmp_path, ids["k"]) is not None
    _integrity(tmp_path)


def test_forget_killed_before_the_ledger_did_not_happen(tmp_path: Path) -> None:
    ids = _seed(tmp_path)
    request_id, _ = _crash_forget(tmp_path, "k", "compliance", "before-ledger")
    assert request_id not in _ledger_ids(tmp_path)
    with cenotaph.open(tmp_path, auto_purge="off") as store:
        record = store.read(SCOPE, "k")
        assert record is not None and record.id == ids["k"] and record.value == "secret"
        with pytest.raises(InvalidValueError):
            store.erasure(request_id)
        assert store.write(SCOPE, "k", "updated", base_version=record.version).value == "updated"
    _integrity(tmp_path)


@pytest.mark.parametrize(("key", "mode"), FORGETS, ids=lambda v: str(v))
def test_open_store_stops_returning_a_key_replayed_from_the_ledger(
    tmp_path: Path, key: str | None, mode: str
) -> None:
    """Store B is open (and has the record cached) while A's forget dies between ledger and
    commit: B's very next read must not return the key."""
    ids = _seed(tmp_path)
    with cenotaph.open(tmp_path, auto_purge="off") as b:
        for _ in range(2):  # warm every cache B has
            assert present(b.read(SCOPE, "k")).value == "secret"
            assert present(b.get(ids["k"])).value == "secret"
        request_id, v_f = _crash_forget(tmp_path, key, mode, "after-ledger")
        assert request_id not in _raw_erasure_ids(tmp_path)
        assert b.read(SCOPE, "k") is None
        assert b.get(ids["k"]) is None
        assert all(r.key != "k" for r in b.list(SCOPE))
        with pytest.raises(ForgottenError) as info:
            b.write(SCOPE, "k", "resurrected?")
        assert info.value.version == v_f
        assert b.erasure(request_id).version == v_f
    with cenotaph.open(tmp_path, auto_purge="off") as store:
        assert store.read(SCOPE, "k") is None
    assert _raw_erasure_ids(tmp_path).count(request_id) == 1


def test_store_replaying_a_scope_forget_drops_its_cached_keys(tmp_path: Path) -> None:
    """Regression: Store B replays (from the ledger) a compliance scope forget whose process died
    before commit; B must drop its cached scope key, or its next reauthorized write is sealed
    with the destroyed key and is unreadable by every other Store (W7)."""
    _seed(tmp_path)
    with cenotaph.open(tmp_path, auto_purge="off") as b:
        assert present(b.read(SCOPE, "k")).value == "secret"  # B caches the scope's key
        _crash_forget(tmp_path, None, "compliance", "after-ledger")
        token = b.reauthorize(SCOPE)
        record = b.write(SCOPE, "k", "after", reauthorization=token)
    with cenotaph.open(tmp_path, auto_purge="off") as store:
        got = store.read(SCOPE, "k")
        assert got is not None and got.version == record.version


def test_threads_keep_working_while_forgetting_processes_are_killed(tmp_path: Path) -> None:
    """Four threads of one store write, read and reauthorize while child processes forget keys,
    two of every three SIGKILLed between their ledger append and their COMMIT. Every forget in
    the ledger ends up in the database exactly once (replayed by whichever thread met it first),
    nothing raises but ForgottenError, and the audit log still verifies against its anchors."""
    import threading

    keys = [f"k{i}" for i in range(20)]
    store = cenotaph.open(tmp_path, auto_purge="off")
    for key in keys:
        store.write(SCOPE, key, 0)
    stop = threading.Event()
    unexpected: list[str] = []
    done = {"ops": 0, "forgotten": 0}

    def work(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            key = rng.choice(keys)
            try:
                if rng.random() < 0.5:
                    store.write(SCOPE, key, rng.random())
                else:
                    store.read(SCOPE, key)
                done["ops"] += 1
            except ForgottenError:
                done["forgotten"] += 1
                with contextlib.suppress(ForgottenError, cenotaph.StaleWriteError):
                    store.write(SCOPE, key, 0, reauthorization=store.reauthorize(SCOPE, key))
            except Exception as exc:  # reported below, never swallowed
                unexpected.append(repr(exc))

    threads = [threading.Thread(target=work, args=(seed,), daemon=True) for seed in range(4)]
    for thread in threads:
        thread.start()
    rng = random.Random(7)
    killed = 0
    try:
        for n in range(9):
            mode = rng.choice(["operational", "compliance"])
            child = run(
                "forget",
                fault="forget.ledgered" if n % 3 != 2 else None,
                location=str(tmp_path),
                scope=SCOPE,
                key=rng.choice(keys),
                mode=mode,
                close=False,
            )
            assert child.returncode in (0, -signal.SIGKILL), child.stderr[-500:]
            killed += child.killed
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert unexpected == []
    assert killed == 6 and done["ops"] > 0
    store.read(SCOPE, keys[0])  # replays whatever the threads did not meet yet
    logged = [e["request_id"] for e in store._provider.ledger() if e.get("kind") == "forget"]
    audit = store.verify_audit()
    store.close()  # before reading the file directly: this process must hold no SQLite locks
    assert len(logged) == len(set(logged)) == 9
    assert sorted(_raw_erasure_ids(tmp_path)) == sorted(logged)
    assert audit["entries"] == 9 and audit["anchored_seq"] >= 1
    _integrity(tmp_path)
