"""Fixtures shared by every suite: the store factory over backends (``tests/kit/stores.py``) and a
clock the test moves (``tests/kit/clock.py``).

``backend`` is parametrised over every backend, but a test marked ``@pytest.mark.sqlite_only``
(about SQLite's files or rows) gets only ``"sqlite"``. In ``tests/erasure`` and
``tests/derived`` every test either runs per backend (it takes ``store_factory`` or ``store``)
or says it is ``sqlite_only``; collection fails on one that does neither.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.kit.clock import ManualClock
from tests.kit.stores import BACKENDS, SQLITE_ONLY, StoreFactory, skip_or_fail_postgres

from cenotaph import Store

# suites whose every test must run per backend or be marked sqlite_only
BACKEND_SUITES = ("erasure", "derived")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        sqlite_only = metafunc.definition.get_closest_marker(SQLITE_ONLY) is not None
        metafunc.parametrize("backend", ("sqlite",) if sqlite_only else BACKENDS, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    undecided = [
        item.nodeid
        for item in items
        if isinstance(item, pytest.Function)
        and item.path.parent.name in BACKEND_SUITES
        and item.path.parent.parent == tests
        and "backend" not in item.fixturenames
        and item.get_closest_marker(SQLITE_ONLY) is None
    ]
    if undecided:
        raise pytest.UsageError(
            f"{len(undecided)} tests neither take store_factory (every backend) nor are marked "
            f"sqlite_only: {', '.join(undecided[:10])}"
        )


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name == "postgres":
        skip_or_fail_postgres()
    return name


@pytest.fixture
def store_factory(backend: str, tmp_path: Path) -> Iterator[StoreFactory]:
    # the default key provider (<dir>/keyring, unsealed), whatever the caller's shell says; in
    # this process and in every child a test starts (its own context: a test's undo() keeps it)
    with pytest.MonkeyPatch.context() as env:
        env.delenv("CENOTAPH_KEYRING", raising=False)
        env.delenv("CENOTAPH_MASTER_KEY", raising=False)
        factory = StoreFactory(backend, tmp_path)
        try:
            yield factory
        finally:
            factory.close_all()


@pytest.fixture
def store(store_factory: StoreFactory) -> Store:
    return store_factory()


@pytest.fixture
def clock() -> ManualClock:
    """A wall clock for TTLs that moves only when the test advances it."""
    return ManualClock()
