"""Fixtures of the derived suite: real SQLite data directories, reopened for restarts.

``stores()`` opens a fresh store in its own directory (auto-purge off unless ``purge=True``, as in
``tests/conformance``: the ciphertext is then still on disk, the stricter case for the read path);
``stores.reopen(store)`` closes it and opens the same directory again with the same options;
``stores.path(store)`` is its data directory. Every store opened here is closed at teardown.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import cenotaph
from cenotaph import Store


class Stores:
    def __init__(self, base: Path) -> None:
        self._base = base
        self._count = 0
        self._opened: list[Store] = []
        self._options: dict[int, tuple[Path, bool]] = {}

    def __call__(self, *, purge: bool = False) -> Store:
        self._count += 1
        return self._open(self._base / f"store{self._count}", purge)

    def _open(self, directory: Path, purge: bool) -> Store:
        store = cenotaph.open(directory, auto_purge=purge)
        self._opened.append(store)
        self._options[id(store)] = (directory, purge)
        return store

    def path(self, store: Store) -> Path:
        return self._options[id(store)][0]

    def reopen(self, store: Store) -> Store:
        directory, purge = self._options[id(store)]
        store.close()
        return self._open(directory, purge)

    def close_all(self) -> None:
        for store in self._opened:
            store.close()


@pytest.fixture(autouse=True)
def _default_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default key provider (``<dir>/keyring``), in this process and in every child it starts."""
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    monkeypatch.delenv("CENOTAPH_MASTER_KEY", raising=False)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    factory = Stores(tmp_path)
    try:
        yield factory
    finally:
        factory.close_all()
