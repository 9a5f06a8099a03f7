"""Fixtures of the backend-neutral conformance suite.

``store_factory`` and ``store`` come from ``tests/conftest.py`` (the factory is
``tests.kit.stores.StoreFactory``), parametrised over every backend. ``store_factory()`` opens
a fresh, empty store; ``store_factory.reopen(store)`` closes it and opens the same location
again (a restart); ``store_factory.twin(store)`` opens the same location a second time, side by
side; every store it opened is closed at teardown. ``store`` is ``store_factory()``.

Tests that inspect what is at rest (files, raw rows) call ``store_factory.raw(store)`` or
``store_factory.files(store)``; a backend without such an inspector skips them (PostgreSQL has
rows, through ``raw``, but no files of the store's: the server keeps them).
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _default_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default key provider: ``<dir>/keyring``, unsealed, whatever the caller's shell says."""
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    monkeypatch.delenv("CENOTAPH_MASTER_KEY", raising=False)
