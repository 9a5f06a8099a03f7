"""Malformed input: the right error class, a message that says what to do, and an unchanged store.

Every bad argument of the public API raises :class:`InvalidScopeError` (scopes) or
:class:`InvalidValueError` (everything else) -- both ``ValueError`` and ``CenotaphError`` -- with a
non-empty message that tells the caller what to do, never echoes a value, and changes nothing:
the records, the rows of every table and the logical clock are exactly as before.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import cenotaph
from cenotaph import Store
from cenotaph.errors import (
    CenotaphError,
    ForgottenError,
    InvalidScopeError,
    InvalidValueError,
)
from cenotaph.validation import MAX_JSON_DEPTH

T = "tenant:t"
U = "tenant:t/user:u"
S1 = "tenant:t/user:u/session:s1"
CANARY = "cnry-bad-input-7f3a9c"
# Words a message uses when it tells the caller what to do (or what a valid input looks like).
GUIDANCE = re.compile(
    r"\b(must|use|e\.g\.|split|choose|shorten|retry|re-read|request|encode|open|forget|returned by|"
    r"at most|write\(\)|list|pass)\b",
    re.IGNORECASE,
)

Call = Callable[[Store], object]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bad-input") / "data"


@pytest.fixture(scope="module")
def store(data_dir: Path) -> Iterator[Store]:
    """One store for the module: every case checks it left the store exactly as it found it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("CENOTAPH_KEYRING", raising=False)
        mp.delenv("CENOTAPH_MASTER_KEY", raising=False)
        with cenotaph.open(data_dir) as s:
            s.write(T, "lang", "en")
            s.write(U, "k", {"v": 1}, subjects=["idp:1"], metadata={"m": 1})
            s.write(S1, "j", [1, 2])
            s.forget(U, "gone").wait()  # its background purge must not change the store under a case
            yield s


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A store of its own, for tests that write valid data."""
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    monkeypatch.delenv("CENOTAPH_MASTER_KEY", raising=False)
    with cenotaph.open(tmp_path / "fresh") as s:
        yield s


def _rows(data_dir: Path) -> dict[str, list[tuple[object, ...]]]:
    with contextlib.closing(sqlite3.connect(data_dir / "cenotaph.db")) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {t: sorted(db.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}


def _snapshot(store: Store, data_dir: Path) -> tuple[object, ...]:
    listing = [r.to_dict() for r in store.list(T, include_descendants=True)]
    reads = [store.read(scope, key) for scope, key in ((S1, "lang"), (S1, "k"), (S1, "j"), (U, "gone"))]
    return listing, reads, _rows(data_dir)


def _check(store: Store, data_dir: Path, call: Call, error: type[CenotaphError]) -> str:
    before = _snapshot(store, data_dir)
    with pytest.raises(error) as info:
        call(store)
    exc = info.value
    assert isinstance(exc, ValueError) and isinstance(exc, CenotaphError)
    if error is InvalidValueError:
        assert not isinstance(exc, InvalidScopeError), "a non-scope argument blamed the scope"
    message = str(exc)
    assert message.strip(), "empty error message"
    assert CANARY not in message, "the message echoes a value"
    assert GUIDANCE.search(message), f"the message does not say what to do: {message!r}"
    assert _snapshot(store, data_dir) == before, "a rejected call changed the store"
    return message


# -- scopes -------------------------------------------------------------------------------
BAD_SCOPES: list[Any] = [
    "",
    "/a:b",
    "a:b/",
    "A:b",
    "a:",
    ":b",
    "a",
    "a:b//c:d",
    "a:b/c",  # an id cannot contain '/': the rest is a malformed segment
    "a:b\x00",
    "a:b\ncd",
    "a:\t",
    "a:b/c:\x7f",
    "tenant:" + "x" * 201,
    "k" * 33 + ":b",
    "1a:b",
    "a b:c",
    "/".join(f"s{i}:x" for i in range(33)),
    123,
    None,
    b"a:b",
    ["a:b"],
]
SCOPE_CALLS: dict[str, Callable[[Any], Call]] = {
    "write": lambda sc: lambda s: s.write(sc, "k", 1),
    "write_many": lambda sc: (
        lambda s: s.write_many([{"scope": T, "key": "x", "value": 1}, {"scope": sc, "key": "k", "value": 1}])
    ),
    "read": lambda sc: lambda s: s.read(sc, "k"),
    "list": lambda sc: lambda s: s.list(sc, include_descendants=True),
    "search": lambda sc: lambda s: s.search(sc, "query"),
    "forget key": lambda sc: lambda s: s.forget(sc, "k"),
    "forget scope": lambda sc: lambda s: s.forget(sc, mode="operational"),
    "reauthorize": lambda sc: lambda s: s.reauthorize(sc),
    "session": lambda sc: lambda s: s.session(sc).__enter__(),
}


@pytest.mark.parametrize("scope", BAD_SCOPES, ids=repr)
@pytest.mark.parametrize("op", SCOPE_CALLS)
def test_bad_scopes(store: Store, data_dir: Path, op: str, scope: object) -> None:
    _check(store, data_dir, SCOPE_CALLS[op](scope), InvalidScopeError)


def test_the_deepest_and_longest_valid_scopes_are_accepted(fresh: Store) -> None:
    deep = "/".join(f"s{i}:x" for i in range(32))
    long_id = "tenant:" + "x" * 200
    long_kind = "k" * 32 + ":b"
    for scope in (deep, long_id, long_kind):
        fresh.write(scope, "k", 1)
        assert fresh.read(scope, "k") is not None


# -- keys ---------------------------------------------------------------------------------
BAD_KEYS: list[Any] = ["", 1, None, b"k", ["k"], "x" * 513, "a\x00b", "line\nbreak", "tab\t", "\u200b"]
KEY_CALLS: dict[str, Callable[[Any], Call]] = {
    "write": lambda k: lambda s: s.write(U, k, 1),
    "read": lambda k: lambda s: s.read(U, k),
    "forget": lambda k: lambda s: s.forget(U, k),
    "reauthorize": lambda k: lambda s: s.reauthorize(U, k),
}


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
@pytest.mark.parametrize("op", KEY_CALLS)
def test_bad_keys(store: Store, data_dir: Path, op: str, key: object) -> None:
    if op == "forget" and key is None:
        pytest.skip("forget(scope, None) is a whole-scope forget, not a bad key")
    if op == "reauthorize" and key is None:
        pytest.skip("reauthorize(scope, None) is a scope token, not a bad key")
    _check(store, data_dir, KEY_CALLS[op](key), InvalidValueError)


def test_the_longest_key_is_accepted(fresh: Store) -> None:
    fresh.write(U, "x" * 512, 1)
    assert fresh.read(U, "x" * 512) is not None


# -- values -------------------------------------------------------------------------------
def _self_containing() -> list[Any]:
    loop: list[Any] = [CANARY]
    loop.append(loop)
    return loop


def _dict_containing_itself() -> dict[str, Any]:
    loop: dict[str, Any] = {"note": CANARY}
    loop["again"] = [loop]
    return loop


def _deep(depth: int) -> list[Any]:
    value: list[Any] = [CANARY]
    for _ in range(depth):
        value = [value]
    return value


class _Opaque:
    def __repr__(self) -> str:
        return CANARY


BAD_VALUES: dict[str, Any] = {
    "set": {1, 2},
    "object": _Opaque(),
    "nan": float("nan"),
    "inf": float("-inf"),
    "bytes": CANARY.encode(),
    "nested set": {"note": CANARY, "bad": {1}},
    "nested nan": [CANARY, float("nan")],
    "lone surrogate": CANARY + "\ud800",
    "over 1 MiB": CANARY + "x" * (1 << 20),
    "over 1 MiB nested": {"a": [CANARY, "x" * (1 << 20)]},
    "nested too deeply": _deep(100_000),
    "one level too deep": _deep(MAX_JSON_DEPTH),  # MAX_JSON_DEPTH lists around the canary's list
    "contains itself": _self_containing(),
    "a dict that contains itself": _dict_containing_itself(),
    "an integer too long to read back": [CANARY, 10**4300],
    # a flat dict of atoms takes a short path through the checks: it refuses the same
    "an integer too long, alone": 10**4300,
    "a flat dict with an integer too long": {"note": CANARY, "n": 10**4300},
    "a flat dict with a key that is not a string": {"note": CANARY, 1: "one"},
}


@pytest.mark.parametrize("value", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_bad_values(store: Store, data_dir: Path, value: object) -> None:
    _check(store, data_dir, lambda s: s.write(U, "k", value), InvalidValueError)
    _check(store, data_dir, lambda s: s.write(U, "new", value), InvalidValueError)


def test_a_value_just_under_the_limit_is_accepted(fresh: Store) -> None:
    value = "x" * ((1 << 20) - 2)  # its JSON (with quotes) is exactly 1 MiB
    fresh.write(U, "big", value)
    got = fresh.read(U, "big")
    assert got is not None and got.value == value


def test_the_deepest_value_and_a_long_integer_are_accepted(fresh: Store) -> None:
    deepest = _deep(MAX_JSON_DEPTH - 1)
    fresh.write(U, "deep", deepest)
    fresh.write(U, "int", 10**4000)
    got = fresh.read(U, "deep")
    assert got is not None and got.value == deepest
    got = fresh.read(U, "int")
    assert got is not None and got.value == 10**4000


def test_a_value_that_contains_itself_is_refused_even_with_a_raised_recursion_limit(tmp_path: Path) -> None:
    """The C encoder recurses on the C stack: with the limit raised, a cycle used to be stopped
    only by the stack running out, which kills the process. Run in a child so a crash shows."""
    script = (
        "import sys, cenotaph\n"
        "sys.setrecursionlimit(1_000_000)\n"
        "from cenotaph.errors import InvalidValueError\n"
        f"s = cenotaph.open({str(tmp_path / 'data')!r})\n"
        "v = {'a': []}; v['a'].append(v)\n"
        "try:\n"
        "    s.write('tenant:t/user:u', 'k', v)\n"
        "except InvalidValueError as exc:\n"
        "    print('refused:', exc)\n"
        "s.close()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CENOTAPH_")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused:" in done.stdout and "contains itself" in done.stdout


class _LyingStr(str):
    """A str subclass whose checks say yes to anything."""

    def isprintable(self) -> bool:
        return True

    def isalnum(self) -> bool:
        return True


def test_str_subclasses_are_checked_as_str_and_never_kept(fresh: Store) -> None:
    source = fresh.write(U, "src", 1)
    key, subject, source_id = _LyingStr("k"), _LyingStr("idp:1"), _LyingStr(source.id)
    rec = fresh.write(_LyingStr(U), key, 2, subjects=[subject], derived_from=[source_id])
    for got in (rec, fresh.get(rec.id), fresh.read(U, "k")):
        assert got is not None
        assert type(got.key) is str and got.key is not key
        assert all(type(x) is str for x in (got.scope, *got.subjects, *got.derived_from))
    with pytest.raises(InvalidValueError):
        fresh.write(U, _LyingStr("bad\x00key"), 1)
    with pytest.raises(InvalidValueError):
        fresh.write(U, "k2", 1, subjects=[_LyingStr("idp:\x00")])
    with pytest.raises(InvalidValueError):
        fresh.write(U, "k3", 1, derived_from=[_LyingStr("not-an-id!")])
    with pytest.raises(InvalidScopeError):
        fresh.write(_LyingStr("tenant:t/user:\x00"), "k4", 1)


def test_a_dict_value_with_non_string_keys_is_rejected(store: Store, data_dir: Path) -> None:
    """{1: "a"} would read back as {"1": "a"}: it is not a JSON value, so it is refused."""
    _check(store, data_dir, lambda s: s.write(U, "k", {1: CANARY}), InvalidValueError)
    _check(store, data_dir, lambda s: s.write(U, "k", [{"ok": {None: 1}}]), InvalidValueError)


# -- subjects, ttl, metadata, derived_from, base_version, reauthorization -----------------
BAD_OPTIONS: dict[str, dict[str, Any]] = {
    "subjects bare string": {"subjects": "idp:1"},
    "subjects int": {"subjects": 5},
    "subjects int item": {"subjects": [1]},
    "subjects None item": {"subjects": [None]},
    "subjects empty item": {"subjects": [""]},
    "subjects control char": {"subjects": ["idp:\x00"]},
    "subjects too long": {"subjects": ["x" * 513]},
    "subjects too many": {"subjects": [f"idp:{i}" for i in range(65)]},
    "ttl negative": {"ttl": -1},
    "ttl zero": {"ttl": 0},
    "ttl zero float": {"ttl": 0.0},
    "ttl nan": {"ttl": float("nan")},
    "ttl inf": {"ttl": float("inf")},
    "ttl str": {"ttl": "60"},
    "ttl bool": {"ttl": True},
    "ttl false": {"ttl": False},
    "ttl list": {"ttl": [60]},
    "ttl negative timedelta": {"ttl": timedelta(seconds=-1)},
    "ttl zero timedelta": {"ttl": timedelta(0)},
    "ttl over 100 years": {"ttl": 101 * 365 * 86400.0},
    "metadata list": {"metadata": [("a", 1)]},
    "metadata str": {"metadata": "a=1"},
    "metadata int key": {"metadata": {1: "a"}},
    "metadata tuple key": {"metadata": {("a",): 1}},
    "metadata set value": {"metadata": {"a": {CANARY}}},
    "metadata nan": {"metadata": {"a": float("nan")}},
    "metadata over 64 KiB": {"metadata": {"a": CANARY + "x" * (64 << 10)}},
    "derived_from unknown id": {"derived_from": ["0" * 32]},
    "derived_from bare string": {"derived_from": "abc"},
    "derived_from int": {"derived_from": 5},
    "derived_from int item": {"derived_from": [1]},
    "derived_from None item": {"derived_from": [None]},
    "derived_from not an id": {"derived_from": ["not-an-id!"]},
    "derived_from too long": {"derived_from": ["a" * 65]},
    "base_version negative": {"base_version": -1},
    "base_version str": {"base_version": "3"},
    "base_version float": {"base_version": 1.5},
    "base_version bool": {"base_version": True},
    "reauthorization int": {"reauthorization": 123},
    "reauthorization bytes": {"reauthorization": b"crt_x"},
    "reauthorization lone surrogate": {"reauthorization": "crt_\ud800"},
    "reauthorization empty": {"reauthorization": ""},
    "ttl beyond float": {"ttl": 10**400},
    "metadata nested too deeply": {"metadata": {"a": _deep(100_000)}},
}


@pytest.mark.parametrize("options", BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_bad_write_options(store: Store, data_dir: Path, options: dict[str, Any]) -> None:
    _check(store, data_dir, lambda s: s.write(U, "k", CANARY, **options), InvalidValueError)
    item = {"scope": S1, "key": "new", "value": CANARY, **options}
    _check(
        store,
        data_dir,
        lambda s: s.write_many([{"scope": T, "key": "fine", "value": 1}, item]),
        InvalidValueError,
    )


# -- other entry points ---------------------------------------------------------------------
OTHER_CALLS: dict[str, Call] = {
    "forget mode bad": lambda s: s.forget(U, "k", mode="hard"),
    "forget mode None": lambda s: s.forget(U, "k", mode=None),  # type: ignore[arg-type]
    "forget mode case": lambda s: s.forget(U, mode="Operational"),
    "forget reason int": lambda s: s.forget(U, "k", reason=5),  # type: ignore[arg-type]
    "forget_subject empty": lambda s: s.forget_subject(""),
    "forget_subject int": lambda s: s.forget_subject(5),  # type: ignore[arg-type]
    "forget_subject None": lambda s: s.forget_subject(None),  # type: ignore[arg-type]
    "forget_subject list": lambda s: s.forget_subject(["idp:1"]),  # type: ignore[arg-type]
    "forget_subject control": lambda s: s.forget_subject("idp:\n1"),
    "forget_subject reason": lambda s: s.forget_subject("idp:1", reason=b"x"),  # type: ignore[arg-type]
    "reauthorize subject empty": lambda s: s.reauthorize(U, subject=""),
    "reauthorize subject int": lambda s: s.reauthorize(U, subject=1),  # type: ignore[arg-type]
    "get int": lambda s: s.get(1),  # type: ignore[arg-type]
    "get None": lambda s: s.get(None),  # type: ignore[arg-type]
    "get slash": lambda s: s.get("abc/def"),
    "get too long": lambda s: s.get("a" * 65),
    "get empty": lambda s: s.get(""),
    "search k zero": lambda s: s.search(U, "query", k=0),
    "search k negative": lambda s: s.search(U, "query", k=-1),
    "search k str": lambda s: s.search(U, "query", k="10"),  # type: ignore[arg-type]
    "search k float": lambda s: s.search(U, "query", k=2.5),  # type: ignore[arg-type]
    "search k bool": lambda s: s.search(U, "query", k=True),
    "search k huge": lambda s: s.search(U, "query", k=10**9),
    "search query empty": lambda s: s.search(U, "  "),
    "search query int": lambda s: s.search(U, 5),  # type: ignore[arg-type]
    "search filter list": lambda s: s.search(U, "q", filter=["a"]),  # type: ignore[arg-type]
    "search filter operator": lambda s: s.search(U, "q", filter={"a": {"$regex": "x"}}),
    "erasure int": lambda s: s.erasure(5),  # type: ignore[arg-type]
    "erasure unknown": lambda s: s.erasure("er_" + "0" * 24),
    "write_many not dicts": lambda s: s.write_many(["abc"]),  # type: ignore[list-item]
    "write_many a str": lambda s: s.write_many("abc"),  # type: ignore[arg-type]
    "write_many missing value": lambda s: s.write_many([{"scope": U, "key": "k"}]),
    "write_many unknown option": lambda s: s.write_many([{"scope": U, "key": "k", "value": 1, "tll": 5}]),
    "write_many None": lambda s: s.write_many(None),  # type: ignore[arg-type]
    "write_many int": lambda s: s.write_many(5),  # type: ignore[arg-type]
    "write_many a dict": lambda s: s.write_many({"scope": U, "key": "k", "value": 1}),  # type: ignore[dict-item]
    "write_many option not a str": lambda s: s.write_many(
        [{"scope": U, "key": "k", "value": 1, 1: 2}]  # type: ignore[dict-item]
    ),
    "erasure lone surrogate": lambda s: s.erasure("er_\ud800"),
    "confirm_erasure lone surrogate": lambda s: s.confirm_erasure("er_\ud800"),
    "attest lone surrogate": lambda s: s.attest("er_\ud800"),
    "attest empty": lambda s: s.attest(""),
    # a truthy string must not mean True: "no" would otherwise erase the ancestors' copies
    "forget include_ancestors str": lambda s: s.forget(S1, "lang", include_ancestors="no"),  # type: ignore[arg-type]
    "forget include_ancestors int": lambda s: s.forget(S1, "lang", include_ancestors=1),  # type: ignore[arg-type]
    "read fallthrough str": lambda s: s.read(S1, "lang", fallthrough="no"),  # type: ignore[arg-type]
    "list include_descendants str": lambda s: s.list(T, include_descendants="no"),  # type: ignore[arg-type]
    "search fallthrough None": lambda s: s.search(S1, "q", fallthrough=None),  # type: ignore[arg-type]
    "search include_descendants str": lambda s: s.search(T, "q", include_descendants="yes"),  # type: ignore[arg-type]
    "purge progress not callable": lambda s: s.purge(progress="x"),  # type: ignore[arg-type]
    "rotate_keys progress not callable": lambda s: s.rotate_keys(progress=42),  # type: ignore[arg-type]
    "backup None": lambda s: s.backup(None),  # type: ignore[arg-type]
    "backup NUL": lambda s: s.backup("/tmp/a\0b"),
    "backup empty": lambda s: s.backup(""),
}


@pytest.mark.parametrize("call", OTHER_CALLS.values(), ids=OTHER_CALLS.keys())
def test_other_bad_arguments(store: Store, data_dir: Path, call: Call) -> None:
    _check(store, data_dir, call, InvalidValueError)


def test_write_many_with_one_bad_item_writes_nothing(store: Store, data_dir: Path) -> None:
    good = [{"scope": U, "key": f"g{i}", "value": i} for i in range(3)]
    bad: list[dict[str, Any]] = [
        {"scope": U, "key": "b", "value": {1, 2}},
        {"scope": "Bad:scope", "key": "b", "value": 1},
        {"scope": U, "key": "", "value": 1},
        {"scope": U, "key": "b", "value": 1, "ttl": -5},
        {"scope": U, "key": "b", "value": 1, "derived_from": ["f" * 32]},
    ]
    for item in bad:
        for position in (0, 1, 3):
            items = [*good[:position], item, *good[position:]]
            error = InvalidScopeError if item["scope"] != U else InvalidValueError
            _check(store, data_dir, partial(Store.write_many, items=items), error)
    assert store.read(U, "g0") is None


def test_write_many_rolls_back_when_one_item_is_forgotten(store: Store, data_dir: Path) -> None:
    before = _snapshot(store, data_dir)
    items = [{"scope": U, "key": "g", "value": 1}, {"scope": S1, "key": "gone", "value": 2}]
    with pytest.raises(ForgottenError):
        store.write_many(items)
    assert _snapshot(store, data_dir) == before
    assert store.read(U, "g") is None


def test_a_bad_call_does_not_poison_the_store(fresh: Store) -> None:
    for call in OTHER_CALLS.values():
        with pytest.raises(InvalidValueError):
            call(fresh)
    fresh.write(U, "after", "fine")
    assert fresh.read(S1, "after") is not None
    fresh.forget(U, "after")
    assert fresh.read(S1, "after") is None


@pytest.mark.parametrize("location", [123, None, b"\x00", "", "a\0b", "a\ud800"], ids=repr)
def test_open_rejects_a_bad_location(
    location: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # "" must not create a store in the working directory
    with pytest.raises((InvalidValueError, TypeError, ValueError)) as info:
        cenotaph.open(location)  # type: ignore[arg-type]
    assert isinstance(info.value, InvalidValueError), (
        f"raised {type(info.value).__name__}, not InvalidValueError"
    )
    assert GUIDANCE.search(str(info.value))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "options",
    [
        {"key_provider": "x"},
        {"embedder": "x"},
        {"auto_purge": "no"},
        {"auto_purge": None},
        {"auto_purge": True},
        {"clock": "x"},
        {"clock": 1.5},
    ],
    ids=repr,
)
def test_open_rejects_bad_options_before_creating_anything(tmp_path: Path, options: dict[str, Any]) -> None:
    with pytest.raises(InvalidValueError) as info:
        cenotaph.open(tmp_path / "data", **options)
    assert GUIDANCE.search(str(info.value))
    assert list(tmp_path.iterdir()) == []


def test_restore_rejects_bad_arguments_and_a_foreign_keyring_leaving_nothing(
    fresh: Store, tmp_path: Path
) -> None:
    fresh.write(U, "k", "v")
    backup = fresh.backup(tmp_path / "bk").path
    keyring = cenotaph.LocalKeyring(Path(fresh.path or "") / "keyring")
    with cenotaph.open(tmp_path / "other") as other:
        foreign = cenotaph.LocalKeyring(Path(other.path or "") / "keyring")
    target = tmp_path / "target"
    bad: list[Callable[[], object]] = [
        lambda: cenotaph.restore(None, target, key_provider=keyring),  # type: ignore[arg-type]
        lambda: cenotaph.restore(backup, "a\0b", key_provider=keyring),
        lambda: cenotaph.restore(backup, target, key_provider="x"),  # type: ignore[arg-type]
        lambda: cenotaph.restore(backup, target, key_provider=keyring, progress=5),  # type: ignore[arg-type]
    ]
    for call in bad:
        with pytest.raises(InvalidValueError) as info:
            call()
        assert GUIDANCE.search(str(info.value))
        assert not target.exists()
    with pytest.raises(CenotaphError):
        cenotaph.restore(backup, target, key_provider=foreign)
    assert not target.exists(), "a refused restore left its copy (and its marker) behind"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CenotaphError):
        cenotaph.restore(backup, empty, key_provider=foreign)
    assert list(empty.iterdir()) == []
    with cenotaph.restore(backup, target, key_provider=keyring) as restored:
        assert restored.read(U, "k").value == "v"  # type: ignore[union-attr]


def test_a_backup_inside_the_data_directory_is_refused(fresh: Store) -> None:
    inside = Path(fresh.path or "") / "bk"
    with pytest.raises(InvalidValueError, match="outside"):
        fresh.backup(inside)
    assert not inside.exists()
    assert fresh.backups() == {}


def test_a_truthy_include_ancestors_keeps_the_ancestors_copy(fresh: Store) -> None:
    """The fuzzer's worst find: include_ancestors="no" used to erase the ancestor's copy."""
    fresh.write(U, "diet", "vegetarian")
    fresh.write(S1, "diet", "vegan")
    with pytest.raises(InvalidValueError):
        fresh.forget(S1, "diet", include_ancestors="no")  # type: ignore[arg-type]
    assert fresh.read(U, "diet").value == "vegetarian"  # type: ignore[union-attr]
    assert fresh.read(S1, "diet", fallthrough=False).value == "vegan"  # type: ignore[union-attr]
    assert fresh.erasures() == []


def test_an_ended_session_refuses_every_call(fresh: Store) -> None:
    fresh.write(U, "k", "v")
    with fresh.session(U) as session:
        assert session.read(U, "k") is not None
    calls: list[Callable[[], object]] = [
        lambda: session.read(U, "k"),
        lambda: session.get("a" * 32),
        lambda: session.list(U),
        lambda: session.search(U, "v"),
        lambda: session.write(U, "late", "v"),
    ]
    for call in calls:
        with pytest.raises(InvalidValueError, match="session has ended"):
            call()
    assert fresh.read(U, "late") is None


def test_open_rejects_a_file_as_data_directory(tmp_path: Path) -> None:
    path = tmp_path / "a-file"
    path.write_text("not a directory")
    with pytest.raises(InvalidValueError) as info:
        cenotaph.open(path)
    assert GUIDANCE.search(str(info.value))
    assert path.read_text() == "not a directory"


def test_a_closed_store_refuses_every_call_with_a_hint(fresh: Store) -> None:
    fresh.close()
    calls: list[Call] = [
        lambda s: s.write(U, "k", 1),
        lambda s: s.read(U, "k"),
        lambda s: s.get("a" * 32),
        lambda s: s.list(U),
        lambda s: s.search(U, "query"),
        lambda s: s.forget(U, "k"),
        lambda s: s.forget_subject("idp:1"),
        lambda s: s.reauthorize(U),
        lambda s: s.release_backup("bk_x"),
        lambda s: s.write_many([]),
        lambda s: s.public_key,
        lambda s: s.backups(),
        lambda s: s.session(U).__enter__(),
    ]
    for call in calls:
        with pytest.raises(CenotaphError) as info:
            call(fresh)
        assert GUIDANCE.search(str(info.value)), str(info.value)
    fresh.close()  # closing twice is fine


def test_write_many_refuses_a_repeated_slot_and_writes_nothing(fresh: Store) -> None:
    """A batch naming one (scope, key) twice is refused whole: accepting it would silently keep
    only the last value while returning a record for each item."""
    fresh.write(U, "other", "kept")
    items = [
        {"scope": U, "key": "first", "value": 0},
        {"scope": U, "key": "dup", "value": 1},
        {"scope": U, "key": "dup", "value": 2},
    ]
    with pytest.raises(InvalidValueError, match="same \\(scope, key\\) twice"):
        fresh.write_many(items)
    assert fresh.read(U, "dup") is None and fresh.read(U, "first") is None  # all or nothing
    assert [r.key for r in fresh.list(U)] == ["other"]
    # the same key in two scopes is two slots, and lands
    written = fresh.write_many(
        [{"scope": U, "key": "dup", "value": 1}, {"scope": f"{U}/x:1", "key": "dup", "value": 2}]
    )
    assert [r.value for r in written] == [1, 2]


def test_a_forgotten_error_crosses_a_process_boundary() -> None:
    """multiprocessing pickles a worker's exception back to its parent."""
    import pickle

    from cenotaph.errors import DerivedFromForgottenError

    for error in (
        ForgottenError("forgotten at version 7; reauthorize", 7),
        DerivedFromForgottenError("gone", 3),
    ):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and copy.version == error.version and str(copy) == str(error)
