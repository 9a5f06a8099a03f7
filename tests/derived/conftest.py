"""Fixtures of the derived suite: its stores come from ``store_factory`` (``tests/conftest.py``,
every backend; auto-purge off unless ``purge=True``, as in ``tests/conformance``: the ciphertext
is then still on disk, the stricter case for the read path). Tests about SQLite's files or rows
are marked ``sqlite_only`` and read them through ``store_factory.data_dir(store)``.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _default_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default key provider (``<dir>/keyring``), in this process and in every child it starts."""
    monkeypatch.delenv("CENOTAPH_KEYRING", raising=False)
    monkeypatch.delenv("CENOTAPH_MASTER_KEY", raising=False)
