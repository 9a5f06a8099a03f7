"""Bearer API keys on streamable HTTP: each key's prefix bounds its connection.

A real ``cenotaph mcp --api-keys`` on loopback; keys made with the data directory's
``ApiKeyRing``. Attacks: no key, a malformed or guessed key, another scheme, a revoked key, a key
for another tenant, a key wider than the server, one key reaching another key's scope, a legacy
session id reused under another key.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from tests.mcp.mcp_kit import SESSION, TENANT, USER, Tools, spawn_http

import cenotaph
from cenotaph.service.apikeys import ApiKeyRing

pytestmark = pytest.mark.anyio

BOB = f"{TENANT}/user:bob"


@contextlib.asynccontextmanager
async def keyed(
    url: str, secret: str, mode: str = "auto", seen: list[str] | None = None
) -> AsyncIterator[Tools]:
    """A Client sending ``secret``; ``seen`` collects the Mcp-Session-Id headers it receives."""

    async def note(response: httpx2.Response) -> None:
        if seen is not None and "mcp-session-id" in response.headers:
            seen.append(response.headers["mcp-session-id"])

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, event_hooks={"response": [note]})
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield Tools(client)


def keys(data: Path) -> dict[str, str]:
    ring = ApiKeyRing(data)
    made = {
        "alice": ring.create(tenant="acme", prefix=USER, role="agent"),
        "bob": ring.create(tenant="acme", prefix=BOB, role="agent"),
        "tenant": ring.create(tenant="acme", prefix=None, role="operator"),
        "globex": ring.create(tenant="globex", prefix="tenant:globex/user:alice", role="agent"),
        "revoked": ring.create(tenant="acme", prefix=USER, role="agent"),
        "consumer": ring.create(tenant="acme", prefix=USER, role="consumer", consumer="cn_summarizer"),
    }
    ring.revoke(made["revoked"][0].id)
    return {name: secret for name, (_, secret) in made.items()}


@pytest.fixture
def secrets(cli_data: Path) -> dict[str, str]:
    with cenotaph.open(cli_data) as store:
        store.write(SESSION, "note", "alice's cardiology note")
        store.write(BOB, "secret", "bob's secret")
    return keys(cli_data)


async def test_requests_without_a_live_key_are_refused(cli_data: Path, secrets: dict[str, str]) -> None:
    alice = secrets["alice"]
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'
    with spawn_http(cli_data, "--api-keys", "--scope", SESSION, "--prefix", TENANT) as url:
        async with httpx.AsyncClient() as http:

            async def status(authorization: str | None) -> int:
                headers = {
                    "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream",
                }
                if authorization is not None:
                    headers["Authorization"] = authorization
                response = await http.post(url, headers=headers, content=body)
                if response.status_code == 401:
                    assert response.headers["www-authenticate"].startswith("Bearer")
                    assert alice not in response.text
                return response.status_code

            assert await status(None) == 401
            assert await status("Bearer") == 401
            assert await status("Bearer cnk_0000000000000000_" + "A" * 43) == 401  # a guessed key
            assert await status(f"Bearer {alice[:-1]}B") == 401  # one character off
            assert await status(f"Basic {alice}") == 401  # another scheme
            assert await status(f"Bearer {alice}{'x' * 300}") == 401
            assert await status(f"Bearer {secrets['revoked']}") == 401
            assert await status(f"Bearer {secrets['globex']}") == 403  # another tenant: nothing here for it
            assert await status(f"Bearer {secrets['consumer']}") == 403  # it only reads, over HTTP
            assert await status(f"Bearer {alice}") != 401


async def test_each_key_reaches_only_its_prefix(cli_data: Path, secrets: dict[str, str]) -> None:
    with spawn_http(cli_data, "--api-keys", "--scope", SESSION, "--prefix", TENANT) as url:
        async with keyed(url, secrets["alice"]) as alice, keyed(url, secrets["bob"]) as bob:
            assert (await alice.ok("memory_read", key="note"))["found"]
            assert await alice.ok("memory_read", key="secret", scope=BOB) == {"found": False, "record": None}
            assert "outside" in await alice.refused("memory_write", key="x", value=1, scope=BOB)
            assert "outside" in await alice.refused("memory_forget", scope=TENANT)
            # bob's default scope is his prefix: the server's --scope is not inside it
            assert (await bob.ok("memory_read", key="secret"))["record"]["scope"] == BOB
            assert (await bob.ok("memory_read", key="note", scope=SESSION))["found"] is False
            assert (await bob.ok("memory_search", query="cardiology note", scope=BOB))["hits"] == []
            written = await bob.ok("memory_write", key="summary", value="bob's own")
            assert written["record"]["scope"] == BOB and written["record"]["derived_from"]
            listed = await alice.ok("memory_list", scope=USER, include_descendants=True)
            assert [r["key"] for r in listed["records"]] == ["note"]
            descriptions = {t.name: t.description or "" for t in (await alice.client.list_tools()).tools}
            assert BOB not in descriptions["memory_write"] and "API key" in descriptions["memory_write"]
        async with keyed(url, secrets["tenant"]) as wide:  # a key wider than the server: the server's prefix
            assert (await wide.ok("memory_read", key="secret", scope=BOB))["found"]
            assert "outside" in await wide.refused("memory_write", key="x", value=1, scope="tenant:globex")


async def test_each_key_is_its_own_connection(cli_data: Path, secrets: dict[str, str]) -> None:
    with spawn_http(cli_data, "--api-keys", "--scope", SESSION, "--prefix", TENANT) as url:
        async with keyed(url, secrets["alice"]) as alice, keyed(url, secrets["tenant"]) as operator:
            await alice.ok("memory_read", key="note")
            unrelated = await operator.ok("memory_write", key="weather", value="sunny", scope=USER)
            derived = await alice.ok("memory_write", key="summary", value="about the note", scope=USER)
    assert unrelated["record"]["derived_from"] == [] and derived["record"]["derived_from"]


async def test_a_legacy_session_cannot_be_borrowed_by_another_key(
    cli_data: Path, secrets: dict[str, str]
) -> None:
    with spawn_http(cli_data, "--api-keys", "--scope", SESSION, "--prefix", TENANT) as url:
        seen: list[str] = []
        async with keyed(url, secrets["alice"], mode="legacy", seen=seen) as alice:
            await alice.ok("memory_read", key="note")
            assert seen, "a legacy session has an id"
            session_id = seen[0]
            async with httpx.AsyncClient() as http:
                response = await http.post(
                    url,
                    headers={
                        "Authorization": f"Bearer {secrets['bob']}",
                        "Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream",
                        "Mcp-Session-Id": session_id,
                        "MCP-Protocol-Version": "2025-11-25",
                    },
                    content=b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"memory_read",'
                    b'"arguments":{"key":"note","scope":"tenant:acme/user:alice/session:s1"}}}',
                )
            assert response.status_code in (200, 404) and "cardiology" not in response.text
            assert (await alice.ok("memory_read", key="note"))["found"]  # alice's session is untouched


async def test_a_revoked_key_stops_at_its_next_call(cli_data: Path, secrets: dict[str, str]) -> None:
    ring = ApiKeyRing(cli_data)
    key, secret = ring.create(tenant="acme", prefix=USER, role="agent")
    with spawn_http(cli_data, "--api-keys", "--scope", SESSION, "--prefix", TENANT) as url:
        async with keyed(url, secret) as tools:
            await tools.ok("memory_read", key="note")
            ring.revoke(key.id)
            with pytest.raises(Exception) as refused:
                await tools.call("memory_read", key="note")
            assert "cardiology" not in str(refused.value)


async def test_the_knowledge_graph_of_each_key_is_under_its_prefix(
    cli_data: Path, secrets: dict[str, str]
) -> None:
    with spawn_http(cli_data, "--api-keys", "--profile", "knowledge-graph", "--prefix", TENANT) as url:
        async with keyed(url, secrets["alice"]) as alice, keyed(url, secrets["bob"]) as bob:
            entity = {"name": "Secret", "entityType": "note", "observations": ["alice only"]}
            await alice.ok("create_entities", entities=[entity])
            assert await bob.ok("read_graph") == {"entities": [], "relations": []}
            assert (await alice.ok("read_graph"))["entities"] == [entity]
            assert (await alice.client.list_resources()).resources == []  # a static resource knows no key
    with cenotaph.open(cli_data) as store:
        assert store.list(USER, include_descendants=True)
        assert [r.key for r in store.list(BOB, include_descendants=True)] == ["secret"]
