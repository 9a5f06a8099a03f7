"""The database-file writer again, this time editing ``cenotaph.db`` while a store has it open
(a server that keeps running), from another process, as such an attacker would.

A scope row's ``parent`` column is what subtree enumeration follows; it is not sealed. Pointing
another tenant's scope at one's own must not make that tenant's records part of one's subtree:
what a record's sealed payload says its scope is decides.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import Setup

ALICE = "tenant:acme/user:alice"
BOB = "tenant:beta/user:bob"

_EDIT = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
token = dict(conn.execute("SELECT id, scope_token FROM records WHERE id IN (?, ?)", sys.argv[2:4]))
conn.execute("UPDATE scopes SET parent = ? WHERE token = ?", (token[sys.argv[2]], token[sys.argv[3]]))
conn.close()
"""


def _reparent(db: Path, child_record: str, parent_record: str) -> None:
    """Another process (so this one's file descriptors and locks are untouched) makes the scope of
    ``parent_record`` the parent of the scope of ``child_record``."""
    subprocess.run([sys.executable, "-c", _EDIT, str(db), parent_record, child_record], check=True)


def test_a_scope_reparented_under_mine_while_the_store_runs_is_not_in_my_subtree(setup: Setup) -> None:
    store = setup.open()
    try:
        mine = store.write(ALICE, "mine", "alice's note")
        theirs = store.write(BOB, "secret", "bob's secret canary-31f")
        assert store.read(BOB, "secret") is not None  # the store has walked bob's scope chain
        _reparent(setup.db, theirs.id, mine.id)

        listed = store.list(ALICE, include_descendants=True)
        assert [r.id for r in listed] == [mine.id]
        with store.session(ALICE) as session:
            assert [r.id for r in session.list(ALICE, include_descendants=True)] == [mine.id]
        for query in ("secret", "bob's secret canary-31f"):
            hits = store.search(ALICE, query, include_descendants=True)
            assert theirs.id not in [h.record.id for h in hits]
        assert store.read(BOB, "secret") is not None  # bob's own reads are untouched
    finally:
        store.close()
