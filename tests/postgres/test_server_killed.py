"""W7 and R2 across app servers on PostgreSQL: a server SIGKILLed in the middle of a large
compliance forget leaves an erasure another server finishes, and no server reads the subject
once the forget is in effect.

Three processes on one schema, each its own ``Store``:

1. an app server forgets subject alice (``ALICE_RECORDS`` records, applied ``CHUNK`` a
   transaction: a head with the ledger entry, then chunks) and is SIGKILLed by a fault point
   (``cenotaph.faults``): at the third chunk boundary, before its forget returned
   (``forget.chunk@3``), or after it returned, at the second chunk of its purge (``purge.chunk@2``);
2. a second server, opened after the kill, finishes the erasure: every request ends
   ``verified`` with a signed certificate, nothing of alice reads, lists or exports, a new write
   about her is refused, bob's records still read, and no row of alice's records is left;
3. a reader that served reads of alice and bob all along never read alice after the forget
   returned in the killed server -- nor after the kill, when it never returned: the head commit
   (before the first chunk) put the whole plan in the ledger, which hides it in every process.
   It did read her before the forget began (the check can fail).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from tests.kit.proc import Child, spawn

from cenotaph import Store

from ._scenarios import now_ns, open_store

ALICE = "tenant:acme/user:alice"
BOB = "tenant:acme/user:bob"
ALICE_RECORDS = 400
BOB_RECORDS = 20
CHUNK = 50  # records a transaction: alice's forget applies in 8 chunks and a last step
SESSIONS = 4


def _slots(user: str, count: int) -> list[list[str]]:
    return [[f"{user}/session:s{i % SESSIONS}", f"note{i}"] for i in range(count)]


def _populate(dsn: str, schema: str, keyring: str) -> list[str]:
    """Alice's and bob's records; the ids of alice's."""
    with open_store(dsn, schema, keyring) as store:
        alice = _write(store, _slots(ALICE, ALICE_RECORDS), "alice")
        _write(store, _slots(BOB, BOB_RECORDS), "bob")
    return alice


def _write(store: Store, slots: list[list[str]], who: str) -> list[str]:
    ids: list[str] = []
    for start in range(0, len(slots), 100):
        items = [
            {"scope": scope, "key": key, "value": {"note": f"{who} said {key}"}, "metadata": {"who": who}}
            for scope, key in slots[start : start + 100]
        ]
        ids.extend(r.id for r in store.write_many(items))
    return ids


def _rows_left(dsn: str, schema: str, ids: list[str]) -> int:
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT count(*) FROM {}.records WHERE id = ANY(%s)").format(sql.Identifier(schema))
        row = conn.execute(query, (ids,)).fetchone()
    assert row is not None
    return int(row[0])


def _states(dsn: str, schema: str) -> list[tuple[str, int | None]]:
    """Each request's state and apply cursor (records applied so far; None once applied whole)."""
    query = sql.SQL(
        "SELECT e.state, p.applied FROM {s}.erasures e LEFT JOIN {s}.erasure_progress p ON p.request_id = e.id"
    ).format(s=sql.Identifier(schema))
    with psycopg.connect(dsn) as conn:
        return [(str(state), applied) for state, applied in conn.execute(query).fetchall()]


def _result(child: Child) -> Any:
    code = child.finish(timeout=240)
    assert code == 0, f"{child.scenario} failed ({code}):\n{child.stderr}"
    return child.result()


def _full_round(reader: Child, ask: Path, number: int) -> None:
    """Wait until the reader has read every key in a round that began after now."""
    ask.with_suffix(".tmp").write_text(str(number))
    ask.with_suffix(".tmp").replace(ask)  # whole, or not there: the reader never sees half a number
    reader.wait_for(f"round {number}")


def _stamp(lines: list[str], word: str) -> int | None:
    """The time on the killed server's ``word ... T`` line (None if it never printed one)."""
    found = [line for line in lines if line.startswith(word + " ")]
    return int(found[0].rsplit(" ", 1)[1]) if found else None


@pytest.mark.parametrize("fault", ["forget.chunk@3", "purge.chunk@2"])
def test_a_server_killed_mid_forget_leaves_an_erasure_another_server_finishes(
    tmp_path: Path, pg_dsn: str, pg_schema: str, fault: str
) -> None:
    keyring = str(tmp_path / "keyring")
    alice_ids = _populate(pg_dsn, pg_schema, keyring)
    db: dict[str, Any] = {"dsn": pg_dsn, "schema": pg_schema, "keyring": keyring}
    watched = [["alice", s, k] for s, k in _slots(ALICE, 12)] + [["bob", s, k] for s, k in _slots(BOB, 4)]
    stop, ask = tmp_path / "stop", tmp_path / "ask"
    with spawn("pg-reader", **db, keys=watched, stop=str(stop), ask=str(ask)) as reader:
        reader.wait_for("ready")
        _full_round(reader, ask, 1)  # the reader sees alice before the forget
        with spawn("pg-forget-subject", fault=fault, **db, subject=ALICE, chunk=CHUNK) as server:
            server.finish()
        dead = now_ns()  # the server was SIGKILLed before this
        assert server.killed, f"not killed at {fault} ({server.returncode}): {server.stderr}"
        began, returned = _stamp(server.lines, "forgetting"), _stamp(server.lines, "returned")
        assert began is not None
        assert (returned is None) == fault.startswith("forget."), (
            server.lines
        )  # killed before / after it returned
        assert "purged" not in " ".join(server.lines)
        # killed mid-way: chunks of the forget left to apply, or rows left to purge
        left = _rows_left(pg_dsn, pg_schema, alice_ids)
        if returned is None:
            assert _states(pg_dsn, pg_schema) == [("tombstoned", 3 * CHUNK)] and left == ALICE_RECORDS
        else:
            assert _states(pg_dsn, pg_schema) == [("shredded", None)] and 0 < left < ALICE_RECORDS
        _full_round(reader, ask, 2)  # reads while nobody finishes the erasure
        with spawn(
            "pg-finish",
            **db,
            subject=ALICE,
            gone=_slots(ALICE, ALICE_RECORDS),
            kept=_slots(BOB, BOB_RECORDS),
        ) as finisher:
            finished = _result(finisher)
        _full_round(reader, ask, 3)  # and after another server finished it
        stop.touch()
        reads = _result(reader)["reads"]

    # the second server finished it: verified (a certificate verified in that process too)
    assert finished["states"] and set(finished["states"].values()) == {"verified"}, finished
    assert finished["gone_found"] == 0 and finished["gone_listed"] == 0, finished
    assert finished["kept_found"] == BOB_RECORDS, finished
    assert finished["write_refused"] == "ForgottenError", finished
    assert _rows_left(pg_dsn, pg_schema, alice_ids) == 0
    with open_store(pg_dsn, pg_schema, keyring) as store:  # and this process sees it so too
        assert all(store.read(s, k) is None for s, k in _slots(ALICE, ALICE_RECORDS))
        assert store.list(ALICE, include_descendants=True) == []

    # the reader: alice readable before, never after the forget was in effect; bob throughout
    assert [r for r in reads if r[4] is not None] == []
    alice_reads = [r for r in reads if r[0] == "alice"]
    assert any(found for _, _, end, found, _ in alice_reads if end < began), "never read alice before"
    in_effect = returned if returned is not None else dead
    late = [r for r in alice_reads if r[1] > in_effect]
    assert late, "no read after the forget was in effect"
    assert [r for r in late if r[3]] == [], f"{len([r for r in late if r[3]])} reads of alice after it"
    assert all(found for label, _, _, found, _ in reads if label == "bob")
