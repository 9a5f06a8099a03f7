"""A real ``cenotaph mcp`` process, through the SDK's Client over stdio and streamable HTTP.

Every tool with good and bad arguments, confinement and the seeds' scenario run on each
transport, and a compliance forget goes on to verified with nobody calling purge (the process
runs the store's background worker); HTTP adds the loopback rules (DNS-rebinding protection, a
non-loopback host refused) and what a connection is there (a legacy session each; the
sessionless protocol one per server).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from mcp import Client
from tests.kit.checks import present
from tests.mcp.mcp_kit import (
    CENOTAPH,
    SESSION,
    USER,
    Tools,
    find_canary,
    spawn_http,
    stdio_params,
    wait_for_file,
)

import cenotaph

pytestmark = pytest.mark.anyio

NOTE = "cardiology appointment Tuesday"


@contextlib.asynccontextmanager
async def connect(
    transport: str, data: Path, *args: str, mode: str = "auto", env: dict[str, str] | None = None
) -> AsyncIterator[Tools]:
    options = ("--scope", SESSION, "--prefix", USER, *args)
    if transport == "stdio":
        async with Client(stdio_params(data, *options, env=env), mode=mode) as client:
            yield Tools(client)
    else:
        with spawn_http(data, *options, env=env) as url:
            async with Client(url, mode=mode) as client:
                yield Tools(client)


def seed(data: Path) -> None:
    with cenotaph.open(data) as store:
        store.write(SESSION, "note", NOTE)
        store.write("tenant:acme/user:bob", "secret", "bob's secret")


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_every_tool_over_a_real_process(cli_data: Path, transport: str) -> None:
    seed(cli_data)
    async with connect(transport, cli_data) as tools:
        listed = {t.name for t in (await tools.client.list_tools()).tools}
        assert listed == {
            "memory_write",
            "memory_read",
            "memory_search",
            "memory_list",
            "memory_forget",
            "erasure_status",
            "erasure_certificate",
        }
        written = await tools.ok("memory_write", key="diet", value={"kind": "vegetarian"}, ttl_seconds=3600)
        assert written["record"]["value"] == {"kind": "vegetarian"}
        assert (await tools.ok("memory_read", key="diet"))["record"]["id"] == written["record"]["id"]
        assert (await tools.ok("memory_search", query="cardiology"))["hits"][0]["record"]["key"] == "note"
        assert sorted(r["key"] for r in (await tools.ok("memory_list"))["records"]) == ["diet", "note"]
        forgotten = await tools.ok("memory_forget", key="diet")
        await tools.until_verified(forgotten["request_id"])
        # bad arguments, one line each
        assert "key" in await tools.refused("memory_write", value=1)
        assert "k" in await tools.refused("memory_search", query="x", k=0)
        assert "mode" in await tools.refused("memory_forget", mode="soft")
        assert "not found" in await tools.refused("erasure_status", request_id="er_nope")
        assert "invalid scope" in await tools.refused("memory_read", key="k", scope="a/../b")
        # confinement: another user answers as if nothing were there
        assert await tools.ok("memory_read", key="secret", scope="tenant:acme/user:bob") == {
            "found": False,
            "record": None,
        }
        assert "outside" in await tools.refused("memory_forget", scope="tenant:acme/user:bob")
        assert "outside" in await tools.refused(
            "memory_write", key="x", value=1, scope="tenant:globex/user:alice"
        )
    with cenotaph.open(cli_data) as store:
        assert present(store.read("tenant:acme/user:bob", "secret")).value == "bob's secret"


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_the_seeds_scenario_over_a_real_process(cli_data: Path, transport: str) -> None:
    seed(cli_data)
    async with connect(transport, cli_data) as tools:
        await tools.ok("memory_read", key="note")
        summary = await tools.ok(
            "memory_write", key="summary", value="User mentioned a cardiology appointment", scope=USER
        )
        assert summary["record"]["derived_from"]
        forgotten = await tools.ok("memory_forget")
        await tools.until_verified(forgotten["request_id"])
        assert (await tools.ok("memory_read", key="summary", scope=USER))["found"] is False
        assert (await tools.ok("memory_search", query="cardiology", scope=USER))["hits"] == []
        assert (await tools.ok("memory_list", scope=USER, include_descendants=True))["records"] == []
        assert "since been forgotten" in await tools.refused(
            "memory_write", key="again", value="cardiology", scope=USER
        )
    with cenotaph.open(cli_data) as store:
        store.confirm_erasure(forgotten["request_id"])
    assert find_canary(cli_data, "cardiology") == []


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_a_forget_verifies_with_nobody_calling_purge_and_then_has_a_certificate(
    cli_data: Path, transport: str
) -> None:
    """The process runs the store's background worker: erasure_status, polled without ever
    asking it to wait (which would nudge a purge), reaches verified, and erasure_certificate then
    returns a certificate that verifies with the public key it names."""
    async with connect(transport, cli_data) as tools:
        info = tools.client.server_info
        assert info is not None and info.name == "cenotaph-memory" and info.version == cenotaph.__version__
        await tools.ok("memory_write", key="diet", value=NOTE)
        forgotten = await tools.ok("memory_forget", key="diet")
        status = await tools.until_verified(forgotten["request_id"])
        assert status["gaps"] == [] and status["state"] == "verified"
        issued = await tools.ok("erasure_certificate", request_id=forgotten["request_id"])
    certificate = cenotaph.verify_certificate(issued["certificate"], issued["public_key"])
    assert certificate["request_id"] == forgotten["request_id"]
    with cenotaph.open(cli_data, auto_purge="off") as store:
        assert issued["public_key"] == store.public_key
        assert store.erasure(forgotten["request_id"]).status().state == "verified"
    assert find_canary(cli_data, NOTE) == []


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_erasure_certificate_names_the_gaps_until_verified(
    cli_data: Path, transport: str, tmp_path: Path
) -> None:
    """The worker held at a pause point after removing the rows: the certificate is refused,
    naming what is missing; let go, the request verifies and the certificate comes."""
    marker = tmp_path / "purging"
    async with connect(transport, cli_data, env={"CENOTAPH_PAUSE": f"purge.rows:{marker}"}) as tools:
        await tools.ok("memory_write", key="diet", value=NOTE)
        forgotten = await tools.ok("memory_forget", key="diet")
        wait_for_file(marker)
        status = await tools.ok("erasure_status", request_id=forgotten["request_id"])
        refused = await tools.refused("erasure_certificate", request_id=forgotten["request_id"])
        assert refused.startswith("not provable yet: ") and status["gaps"]
        assert all(gap in refused for gap in status["gaps"]), (refused, status["gaps"])
        marker.unlink()
        await tools.until_verified(forgotten["request_id"])
        issued = await tools.ok("erasure_certificate", request_id=forgotten["request_id"])
        assert issued["certificate"]["request_id"] == forgotten["request_id"]
        operational = await tools.ok("memory_forget", key="other", mode="operational")
        assert "operational" in await tools.refused(
            "erasure_certificate", request_id=operational["request_id"]
        )
        wait_for_file(marker)  # the worker reclaims the operational forget's rows too: let it go
        marker.unlink()
        assert "not found" in await tools.refused("erasure_certificate", request_id="er_" + "0" * 24)


async def test_the_knowledge_graph_profile_over_http(cli_data: Path) -> None:
    with spawn_http(cli_data, "--profile", "knowledge-graph", "--prefix", USER) as url:
        async with Client(url) as client:
            tools = Tools(client)
            await tools.ok(
                "create_entities", entities=[{"name": "Alice", "entityType": "person", "observations": ["x"]}]
            )
            assert (await tools.ok("search_nodes", query="alice"))["entities"][0]["name"] == "Alice"
            await tools.ok("delete_entities", entityNames=["Alice"])
            assert await tools.ok("read_graph") == {"entities": [], "relations": []}


async def test_legacy_http_sessions_are_separate_connections(cli_data: Path) -> None:
    seed(cli_data)
    with spawn_http(cli_data, "--scope", SESSION, "--prefix", USER) as url:
        async with Client(url, mode="legacy") as reader_client, Client(url, mode="legacy") as writer_client:
            reader, writer = Tools(reader_client), Tools(writer_client)
            await reader.ok("memory_read", key="note")
            unrelated = await writer.ok("memory_write", key="weather", value="sunny", scope=USER)
            derived = await reader.ok("memory_write", key="summary", value="about the note", scope=USER)
        assert unrelated["record"]["derived_from"] == [] and derived["record"]["derived_from"]


async def test_sessionless_http_requests_share_one_read_set(cli_data: Path) -> None:
    """The 2026 protocol has no connection; the server then taints conservatively: a write by
    any sessionless client is derived from what every sessionless client read."""
    seed(cli_data)
    with spawn_http(cli_data, "--scope", SESSION, "--prefix", USER) as url:
        async with Client(url) as first_client:
            assert first_client.protocol_version == "2026-07-28"
            await Tools(first_client).ok("memory_read", key="note")
        async with Client(url) as second_client:
            written = await Tools(second_client).ok("memory_write", key="summary", value="later", scope=USER)
    assert written["record"]["derived_from"], "a sessionless write is linked to what was read before"


async def test_http_refuses_other_hosts_in_the_host_header(cli_data: Path) -> None:
    with spawn_http(cli_data, "--scope", SESSION) as url:
        async with httpx.AsyncClient() as http:
            rebinding = await http.post(
                url, headers={"Host": "evil.example:80", "Content-Type": "application/json"}, content=b"{}"
            )
            assert rebinding.status_code in (400, 403, 421)
            garbage = await http.post(url, headers={"Content-Type": "application/json"}, content=b"{not json")
            assert garbage.status_code < 500


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "10.0.0.1", "192.0.2.1"])
def test_a_non_loopback_host_without_api_keys_is_refused_before_anything_opens(
    cli_data: Path, host: str
) -> None:
    result = run_mcp(cli_data, "--transport", "streamable-http", "--host", host, "--no-api-keys")
    assert result.returncode == 2 and "--api-keys" in result.stderr and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_non_loopback_host_requires_api_keys_by_default(cli_data: Path) -> None:
    """192.0.2.1 (TEST-NET-1) is on no interface here: the server gets as far as binding it,
    with keys required, and says it cannot listen -- no socket is ever opened beyond loopback."""
    result = run_mcp(cli_data, "--transport", "streamable-http", "--host", "192.0.2.1", "--port", "0")
    assert result.returncode == 2 and "cannot listen on 192.0.2.1" in result.stderr
    named = run_mcp(cli_data, "--transport", "streamable-http", "--host", "example.com")
    assert named.returncode == 2 and "IP address" in named.stderr


def run_mcp(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CENOTAPH, "mcp", "--data", str(data), "--scope", SESSION, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--scope", "not a scope"], "scope"),
        (["--scope", SESSION, "--prefix", "tenant:acme/user:bob"], "ancestors"),
        ([], "--scope"),
        (["--scope", SESSION, "--profile", "vector"], "profile"),
        (["--scope", SESSION, "--transport", "sse"], "transport"),
        (["--scope", SESSION, "--port", "70000"], "port"),
        (["--scope", SESSION, "--api-keys"], "streamable-http"),
    ],
)
def test_bad_options_exit_2_with_one_line(cli_data: Path, args: list[str], says: str) -> None:
    result = subprocess.run(
        [CENOTAPH, "mcp", "--data", str(cli_data), *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and says in result.stderr and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_missing_store_is_not_created(tmp_path: Path) -> None:
    result = subprocess.run(
        [CENOTAPH, "mcp", "--data", str(tmp_path / "typo"), "--scope", SESSION],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "cenotaph init" in result.stderr
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_re_forgetting_an_operators_forget_does_not_reopen_it(cli_data: Path, transport: str) -> None:
    """The re-forget attack against a real ``cenotaph mcp``: an operator forgot a key; the agent
    forgets it again, then writes it. The operator's forget still blocks and is not the
    connection's to lift; a key the connection forgot itself it may write again."""
    with cenotaph.open(cli_data) as store:
        store.write(SESSION, "diet", NOTE)
        operator = store.forget(SESSION, "diet", mode="operational")
    async with connect(transport, cli_data) as tools:
        await tools.ok("memory_forget", key="diet", mode="operational")  # the same key, again
        text = await tools.refused("memory_write", key="diet", value="resurrected")
        assert "another connection or an operator" in text
        await tools.ok("memory_write", key="mine", value="v1")
        await tools.ok("memory_forget", key="mine", mode="operational")
        await tools.ok("memory_write", key="mine", value="v2")  # its own forget: reopened
    with cenotaph.open(cli_data, auto_purge="off") as store:
        assert store.read(SESSION, "diet") is None
        assert operator.version in store.forgets_blocking(SESSION, "diet")
        record = store.read(SESSION, "mine")
        assert record is not None and record.value == "v2"
