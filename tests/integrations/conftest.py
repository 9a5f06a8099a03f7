"""Shared test setup for the framework integrations (and the peer suites vendored beside them).

The peers' async tests are bare ``async def`` functions (their projects run pytest-asyncio in
auto mode); here every coroutine test under this directory runs on anyio's pytest plugin (asyncio
backend), which also drives their async fixtures. ``flaky`` (pytest-retry's) and ``asyncio``
(pytest-asyncio's), markers in the peers' suites, are registered so ``--strict-markers`` accepts
them; neither plugin is installed, so nothing is retried.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "flaky(retries): pytest-retry's marker in vendored peer tests")
    config.addinivalue_line(
        "markers", "asyncio: pytest-asyncio's marker in vendored peer tests (run by anyio)"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> object:
    # before anyio's own hook looks at the function's marks (it then adds its backend fixture)
    if inspect.iscoroutinefunction(obj) and HERE in Path(str(collector.path)).parents:
        pytest.mark.anyio(obj)
    return (yield)
