"""Input that used to be accepted and should not be: each is refused before anything changes.

- a ``base_version`` newer than the store's clock (no such version exists: the write would never
  be stale, whatever happened);
- a malformed reauthorization token, even on a write that needs no token;
- a scope id that starts or ends with a space, or holds `` kind:id`` after a space (``tenant:acme
  user:x`` is one segment whose id looks like a second segment; a space elsewhere is allowed).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.kit.checks import present
from tests.test_cli import assert_one_line_error, ok_json, run

import cenotaph
from cenotaph import InvalidScopeError, InvalidValueError, Store

U = "tenant:acme/user:alice"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with cenotaph.open(tmp_path / "data", auto_purge="off") as opened:
        yield opened


# -- base_version from the future ------------------------------------------------------------
def test_a_base_version_from_the_future_is_refused(store: Store) -> None:
    record = store.write(U, "k", 1)
    assert store.write(U, "k", 2, base_version=record.version).value == 2  # the present is fine
    clock = record.version + 1
    for future in (clock + 1, 10**9):
        with pytest.raises(InvalidValueError, match="newer than anything this store has written"):
            store.write(U, "k", 3, base_version=future)
        with pytest.raises(InvalidValueError):
            store.write(U, "new", 3, base_version=future)  # a slot that never held anything, too
    assert present(store.read(U, "k")).value == 2 and store.read(U, "new") is None


def test_a_base_version_from_the_future_fails_a_whole_batch(store: Store) -> None:
    store.write(U, "k", 1)
    with pytest.raises(InvalidValueError):
        store.write_many(
            [{"scope": U, "key": "a", "value": 1}, {"scope": U, "key": "b", "value": 2, "base_version": 99}]
        )
    assert store.read(U, "a") is None


def test_a_base_version_from_the_future_is_bad_input_on_the_cli(tmp_path: Path) -> None:
    d = ("--data", str(tmp_path / "data"))
    run("init", *d)
    ok_json("write", U, "k", "v", *d)
    line = assert_one_line_error(run("write", U, "k", "v2", "--base-version", "5", *d), 2)
    assert "--base-version 5" in line
    assert ok_json("read", U, "k", *d)["value"] == "v"


# -- reauthorization tokens ---------------------------------------------------------------------
MALFORMED = [
    "crt_",
    "crt_short",
    "crt_" + "A" * 42,
    "crt_" + "A" * 44,
    "crt_" + "A" * 42 + "!",
    "xrt_" + "A" * 43,
    " crt_" + "A" * 43,
]


@pytest.mark.parametrize("token", MALFORMED, ids=range(len(MALFORMED)))
def test_a_malformed_token_is_refused_even_when_no_token_is_needed(store: Store, token: str) -> None:
    with pytest.raises(InvalidValueError, match=r"store\.reauthorize\(\)"):
        store.write(U, "k", 1, reauthorization=token)  # nothing was ever forgotten here
    assert store.read(U, "k") is None


def test_a_token_the_store_issued_matches_the_format(store: Store) -> None:
    store.write(U, "k", 1)
    store.forget(U, "k")
    token = store.reauthorize(U, "k")
    assert store.write(U, "k", 2, reauthorization=token).value == 2
    well_formed_unknown = "crt_" + "A" * 43
    assert store.write(U, "other", 1, reauthorization=well_formed_unknown).value == 1  # not needed


def test_a_malformed_token_is_bad_input_on_the_cli(tmp_path: Path) -> None:
    d = ("--data", str(tmp_path / "data"))
    run("init", *d)
    line = assert_one_line_error(run("write", U, "k", "v", "--reauthorization", "crt_oops", *d), 2)
    assert "store.reauthorize" not in line and "cenotaph reauthorize" in line  # the CLI speaks CLI
    assert run("read", U, "k", *d).exit_code == 1


# -- scope ids with spaces ----------------------------------------------------------------------
REFUSED_SCOPES = {
    "tenant:acme user:x": "looks like another segment",
    "tenant:acme/user:alice session:s1": "looks like another segment",
    "doc:a b:c": "looks like another segment",
    "tenant:acme /user:x": "starts or ends with a space",
    "tenant: acme": "starts or ends with a space",
    "tenant:acme/user:alice ": "starts or ends with a space",
}
ALLOWED_SCOPES = [
    "tenant:Q3 report",
    "tenant:note re: lunch",
    "doc:meet at 10:30",
    "user:Ada Lovelace",
    "doc:id with spaces:and:colons",
]


@pytest.mark.parametrize("scope", sorted(REFUSED_SCOPES))
def test_a_scope_id_that_hides_a_mistake_is_refused(store: Store, scope: str) -> None:
    with pytest.raises(InvalidScopeError, match=REFUSED_SCOPES[scope]):
        store.write(scope, "k", 1)
    for call in (lambda: store.read(scope, "k"), lambda: store.list(scope), lambda: store.forget(scope)):
        with pytest.raises(InvalidScopeError):
            call()


@pytest.mark.parametrize("scope", ALLOWED_SCOPES)
def test_a_space_inside_an_id_is_still_allowed(store: Store, scope: str) -> None:
    store.write(scope, "k", 1)
    assert present(store.read(scope, "k")).scope == scope


def test_a_refused_scope_is_bad_input_on_the_cli(tmp_path: Path) -> None:
    d = ("--data", str(tmp_path / "data"))
    run("init", *d)
    line = assert_one_line_error(run("write", "tenant:acme user:x", "k", "v", *d), 2)
    assert "join segments with '/'" in line
