"""``Store.forgets_blocking``: which forgets refuse a write, as a write would see them (W1).

The MCP server reauthorizes only its own connection's forgets; it needs to know, content-free,
whether anyone else's forget (or a subject erasure) also covers the write.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import cenotaph
from cenotaph.errors import ForgottenError

USER = "tenant:acme/user:alice"
SESSION = f"{USER}/session:s1"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[cenotaph.Store]:
    with cenotaph.open(tmp_path / "data", auto_purge="off") as opened:
        yield opened


def test_nothing_blocks_a_fresh_target(store: cenotaph.Store) -> None:
    assert store.forgets_blocking(SESSION, "k") == []
    store.write(SESSION, "k", "v")
    assert store.forgets_blocking(SESSION, "k") == []


def test_key_scope_and_subject_forgets_are_reported_by_version(store: cenotaph.Store) -> None:
    store.write(SESSION, "k", "v")
    key_forget = store.forget(SESSION, "k")
    assert store.forgets_blocking(SESSION, "k") == [key_forget.version]
    assert store.forgets_blocking(f"{SESSION}/doc:d", "k") == [key_forget.version]  # a descendant
    assert store.forgets_blocking(SESSION, "other") == []
    assert store.forgets_blocking(USER, "k") == []  # an ancestor is not covered
    scope_forget = store.forget(USER)
    assert store.forgets_blocking(SESSION, "k") == [key_forget.version, scope_forget.version]
    subject = store.forget_subject(USER)
    assert subject.version in store.forgets_blocking(f"{USER}/session:s2", "new")
    assert store.forgets_blocking("tenant:acme/user:bob", "k") == []


def test_the_answer_agrees_with_a_write(store: cenotaph.Store) -> None:
    store.write(SESSION, "k", "v")
    first = store.forget(SESSION, "k")
    with pytest.raises(ForgottenError) as refused:
        store.write(SESSION, "k", "again")
    assert refused.value.version == max(store.forgets_blocking(SESSION, "k")) == first.version
    token = store.reauthorize(SESSION, "k")
    store.write(SESSION, "k", "again", reauthorization=token)
    assert store.forgets_blocking(SESSION, "k") == []  # lifted: the next write needs no token
    store.write(SESSION, "k", "third")


def test_bad_arguments_are_refused(store: cenotaph.Store) -> None:
    with pytest.raises(cenotaph.InvalidScopeError):
        store.forgets_blocking("not a scope", "k")
    with pytest.raises(cenotaph.InvalidValueError):
        store.forgets_blocking(SESSION, "")
