"""Fixtures of the HTTP tests: one store and app per module, served two ways.

``world`` opens a store and an app once per module, enters it through Starlette's ASGI test
transport and serves it with a real uvicorn on a loopback port (port 0: the OS picks). Each test
takes a fresh ``tenant`` (a new tenant id with its own keys), so tests share the store but never
each other's data. ``api`` is parametrised over both transports.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from tests.http._support import TRANSPORTS, Tenant, World

import cenotaph


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with World(tmp_path_factory.mktemp("http")) as w:
        yield w


@pytest.fixture
def tenant(world: World) -> Tenant:
    return world.tenant()


@pytest.fixture
def other(world: World) -> Tenant:
    """A second tenant, to attempt cross-tenant access from."""
    return world.tenant()


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def api(world: World, transport: str) -> httpx.Client:
    """An HTTP client of the app, through the ASGI transport or a real uvicorn."""
    return world.client(transport)


@pytest.fixture
def remote(world: World, tenant: Tenant, transport: str) -> Iterator[cenotaph.Client]:
    """The remote client with the tenant's operator key, over either transport."""
    http = world.client(transport) if transport == "asgi" else None
    with cenotaph.Client(world.base_url(transport), tenant.operator, http_client=http) as client:
        yield client
