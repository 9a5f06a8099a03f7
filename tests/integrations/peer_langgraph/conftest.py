"""Where cenotaph's CenotaphStore and AsyncCenotaphStore differ from LangGraph's stores under their
own tests.

Each test below fails against them for the reason given (docs/integrations.md lists
them); it runs as a strict xfail, so a change that makes it pass is noticed. Under
``CENOTAPH_PEER_TARGET=sqlite`` (LangGraph's own SqliteStore) nothing is marked.
"""

from __future__ import annotations

import pytest
from tests.integrations.peer_langgraph.lg_shim import TARGET

DIFFERENCES = {
    "test_lg_sqlite_store.py::test_vector_store_initialization": (
        "reads SqliteStore's own sqlite_master through store.conn; CenotaphStore has no such "
        "connection (its vectors live sealed inside the item records)"
    ),
    "test_lg_sqlite_store.py::test_nonnull_migrations": (
        "checks SqliteStore.MIGRATIONS, SqliteStore's schema; cenotaph's schema is its own"
    ),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if TARGET != "cenotaph":
        return
    for item in items:
        name = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        if name in DIFFERENCES:
            item.add_marker(pytest.mark.xfail(reason=DIFFERENCES[name], strict=True))
