"""What a write transaction reads with its BEGIN and locks answers its later reads exactly as the
server would (``PostgresTxn._from_ahead``): the scopes rows read ahead (a scope's chain, a
subtree) and the subjects rows answer every read of the rows they hold in full, as often as it
is made, and nothing after the transaction's first write; a read they hold only in part goes to
the server."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest

from cenotaph.backends import ops
from cenotaph.backends.base import ScopeKeyRow
from cenotaph.backends.postgres import PostgresBackend

pytestmark = pytest.mark.postgres


def _tok(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


# root > user > (session a > task, session b); other > elsewhere
ROOT, USER, A, TASK, B, OTHER, ELSEWHERE = (
    _tok(n) for n in ("root", "user", "a", "task", "b", "other", "else")
)
P, Q = _tok("person p"), _tok("person q")
TREE = {ROOT: None, USER: ROOT, A: USER, TASK: A, B: USER, OTHER: None, ELSEWHERE: OTHER}
ASKED: list[ops.Op[Any]] = [
    ops.ScopeChainRows(TASK),
    ops.ScopeChainRows(B),
    ops.ScopeChainRows(USER),
    ops.ScopeRows([A, TASK, B]),
    ops.ScopeRows([A, USER, ROOT]),
    ops.SubtreeTokens(USER),
    ops.SubjectRows([P]),
    ops.SubjectRows([P, Q]),
]
OUTSIDE: list[ops.Op[Any]] = [  # rows the read-ahead does not hold
    ops.ScopeChainRows(ELSEWHERE),
    ops.ScopeRows([A, OTHER]),
    ops.ScopeRows([_tok("nowhere")]),
    ops.SubtreeTokens(A),
    ops.SubjectRows([P, _tok("person r")]),
]


@pytest.fixture
def store_backend(open_backend: Callable[[], PostgresBackend]) -> PostgresBackend:
    opened = open_backend()
    with opened.write() as txn:
        txn.run(
            ops.InsertScopes(
                ScopeKeyRow(token, parent, b"wrapped-" + token[:4], 1) for token, parent in TREE.items()
            )
        )
        txn.run(ops.InsertSubjects((token, b"wrapped-" + token[:4], 1) for token in (P, Q)))
    return opened


def _answers(backend: PostgresBackend, asked: list[ops.Op[Any]], ahead: list[ops.Op[Any]]) -> list[Any]:
    with backend.write(None, ahead) as txn:
        return [_plain(txn.run(op)) for op in asked]


def _plain(answer: Any) -> Any:
    return sorted(answer) if isinstance(answer, list) else answer


def _statements(backend: PostgresBackend, asked: list[ops.Op[Any]], ahead: list[ops.Op[Any]]) -> int:
    """How many statements the reads of ``asked`` sent (after those of BEGIN)."""
    with backend.write(None, ahead) as txn:
        sent: list[str] = []
        conn = txn.connection
        original = conn.execute

        def execute(query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(str(query))
            return original(query, *args, **kwargs)

        conn.execute = execute  # type: ignore[method-assign]
        try:
            for op in asked:
                txn.run(op)
        finally:
            del conn.execute
    return len(sent)


def test_the_rows_read_ahead_answer_as_the_server_does(store_backend: PostgresBackend) -> None:
    ahead: list[ops.Op[Any]] = [ops.ScopeChainRows(USER), ops.SubtreeRows(USER), ops.SubjectRows([P, Q])]
    from_server = _answers(store_backend, ASKED + OUTSIDE, [])
    assert _answers(store_backend, ASKED + OUTSIDE, ahead) == from_server
    assert from_server[0] == {
        t: ScopeKeyRow(t, TREE[t], b"wrapped-" + t[:4], 1) for t in (TASK, A, USER, ROOT)
    }
    assert sorted(from_server[5]) == sorted([USER, A, TASK, B])


def test_reads_held_in_full_send_nothing_and_the_others_go_to_the_server(
    store_backend: PostgresBackend,
) -> None:
    ahead: list[ops.Op[Any]] = [ops.ScopeChainRows(USER), ops.SubtreeRows(USER), ops.SubjectRows([P, Q])]
    assert _statements(store_backend, ASKED, ahead) == 0
    assert _statements(store_backend, ASKED, []) == len(ASKED)
    assert _statements(store_backend, OUTSIDE, ahead) == len(OUTSIDE)


def test_after_the_first_write_every_read_goes_to_the_server(store_backend: PostgresBackend) -> None:
    ahead: list[ops.Op[Any]] = [ops.ScopeChainRows(USER), ops.SubtreeRows(USER), ops.SubjectRows([P, Q])]
    with store_backend.write(None, ahead) as txn:
        txn.run(ops.DestroyKeys([A], [], 9))
        chain = txn.run(ops.ScopeChainRows(TASK))
        rows = txn.run(ops.ScopeRows([A]))
    assert chain[A].wrapped is None and rows[A].wrapped is None  # as written, not as read ahead
    assert chain[USER].wrapped is not None
