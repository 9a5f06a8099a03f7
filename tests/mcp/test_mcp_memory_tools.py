"""The memory profile's seven tools through the SDK's own Client, in memory: good and bad arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.kit.checks import present
from tests.kit.clock import ManualClock
from tests.mcp.mcp_kit import SESSION, TENANT, USER, Tools, memory_client

import cenotaph

pytestmark = pytest.mark.anyio

TOOLS = {
    "memory_write",
    "memory_read",
    "memory_search",
    "memory_list",
    "memory_forget",
    "erasure_status",
    "erasure_certificate",
}


async def test_the_seven_tools_have_typed_output_schemas_and_name_the_prefix(
    mcp_store: cenotaph.Store,
) -> None:
    async with memory_client(mcp_store) as tools:
        listed = (await tools.client.list_tools()).tools
    assert {t.name for t in listed} == TOOLS
    for tool in listed:
        assert tool.output_schema and tool.output_schema["type"] == "object", tool.name
        assert tool.description and len(tool.description) > 80, tool.name
        assert "ctx" not in tool.input_schema["properties"]
    descriptions = {t.name: t.description or "" for t in listed}
    assert USER in descriptions["memory_write"] and SESSION in descriptions["memory_write"]
    assert "compliance" in descriptions["memory_forget"] and "verified" in descriptions["erasure_status"]
    write = next(t for t in listed if t.name == "memory_write")
    assert set(write.input_schema["required"]) == {"key", "value"}
    assert set(present(write.output_schema)["properties"]) == {"record", "reauthorized"}


@pytest.mark.parametrize(
    "value",
    [
        "vegetarian",
        "null",
        "[1, 2]",
        '{"a": 1}',
        "true",
        42,
        2.5,
        True,
        None,
        [1, "two", {"three": 3}],
        {"nested": {"x": [1]}},
    ],
)
async def test_write_then_read_returns_exactly_the_value(mcp_store: cenotaph.Store, value: object) -> None:
    async with memory_client(mcp_store) as tools:
        written = await tools.ok("memory_write", key="k", value=value)
        read = await tools.ok("memory_read", key="k")
    assert written["record"]["value"] == value and type(written["record"]["value"]) is type(value)
    assert read == {"found": True, "record": written["record"]}
    assert present(mcp_store.read(SESSION, "k")).value == value  # strings that look like JSON stay strings


async def test_results_are_readable_as_text(mcp_store: cenotaph.Store) -> None:
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_write", key="diet", value="vegetarian")
        result = await tools.call("memory_read", key="diet")
    text = result.content[0].text  # type: ignore[union-attr]
    assert "'diet' found in" in text.splitlines()[0] and '"vegetarian"' in text


async def test_reads_fall_through_to_wider_scopes_but_stop_at_the_prefix(mcp_store: cenotaph.Store) -> None:
    mcp_store.write(USER, "diet", "vegetarian")
    mcp_store.write(TENANT, "policy", "tenant-wide, outside the prefix")
    async with memory_client(mcp_store) as tools:
        found = await tools.ok("memory_read", key="diet")
        assert found["record"]["scope"] == USER
        assert await tools.ok("memory_read", key="policy") == {"found": False, "record": None}
        assert (await tools.ok("memory_search", query="tenant-wide outside prefix"))["hits"] == []
        hits = (await tools.ok("memory_search", query="vegetarian"))["hits"]
        assert [h["record"]["key"] for h in hits] == ["diet"] and hits[0]["score"] > 0
    assert (
        mcp_store.read(SESSION, "policy") is not None
    )  # the store itself falls through; the server does not


async def test_the_default_prefix_is_the_scope_itself(mcp_store: cenotaph.Store) -> None:
    mcp_store.write(USER, "diet", "vegetarian")
    async with memory_client(mcp_store, prefix=None) as tools:
        assert (await tools.ok("memory_read", key="diet"))["found"] is False
        await tools.refused("memory_write", key="x", value=1, scope=USER)


async def test_list_and_descendants(mcp_store: cenotaph.Store) -> None:
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_write", key="b", value=2)
        await tools.ok("memory_write", key="a", value=1)
        await tools.ok("memory_write", key="pref", value="x", scope=USER)
        listed = await tools.ok("memory_list")
        assert [r["key"] for r in listed["records"]] == ["a", "b"]
        user_only = await tools.ok("memory_list", scope=USER)
        assert [r["key"] for r in user_only["records"]] == ["pref"]
        everything = await tools.ok("memory_list", scope=USER, include_descendants=True)
        assert sorted(r["key"] for r in everything["records"]) == ["a", "b", "pref"]


async def test_search_k_and_scope(mcp_store: cenotaph.Store) -> None:
    async with memory_client(mcp_store) as tools:
        for i in range(5):
            await tools.ok("memory_write", key=f"tennis{i}", value=f"tennis match number {i}")
        await tools.ok("memory_write", key="food", value="vegetarian food", scope=USER)
        assert len((await tools.ok("memory_search", query="tennis match", k=3))["hits"]) == 3
        hits = (await tools.ok("memory_search", query="vegetarian food"))["hits"]
        assert hits[0]["record"]["key"] == "food"
        user_hits = (await tools.ok("memory_search", query="tennis match", scope=USER))["hits"]
        assert user_hits == []  # a wider scope does not search its sessions


async def test_ttl_expires(tmp_path: Path, clock: ManualClock) -> None:
    with cenotaph.open(tmp_path / "data", auto_purge="sync", clock=clock) as store:
        async with memory_client(store) as tools:
            written = await tools.ok("memory_write", key="otp", value="123456", ttl_seconds=60)
            assert written["record"]["expires_at"] is not None
            assert (await tools.ok("memory_read", key="otp"))["found"]
            clock.advance(61)
            assert (await tools.ok("memory_read", key="otp"))["found"] is False
            assert (await tools.ok("memory_list"))["records"] == []


async def test_explicit_derived_from_is_recorded_and_checked(mcp_store: cenotaph.Store) -> None:
    outside = mcp_store.write("tenant:acme/user:bob", "secret", "bob's")
    async with memory_client(mcp_store) as tools:
        source = (await tools.ok("memory_write", key="src", value="source"))["record"]
        derived = await tools.ok("memory_write", key="d", value="made from src", derived_from=[source["id"]])
        assert source["id"] in derived["record"]["derived_from"]
        missing = await tools.refused("memory_write", key="d2", value=1, derived_from=["0" * 32])
        foreign = await tools.refused("memory_write", key="d2", value=1, derived_from=[outside.id])
        assert missing == foreign  # another user's record answers as if it did not exist
        await tools.refused("memory_write", key="d2", value=1, derived_from=["not an id!"])
    assert mcp_store.read(SESSION, "d2") is None


async def test_base_version_refuses_a_stale_write(mcp_store: cenotaph.Store) -> None:
    async with memory_client(mcp_store) as tools:
        first = (await tools.ok("memory_write", key="k", value=1))["record"]
        await tools.ok("memory_write", key="k", value=2, base_version=first["version"])
        stale = await tools.refused("memory_write", key="k", value=3, base_version=first["version"])
        assert stale.startswith("refused:") and "re-read" in stale
    assert present(mcp_store.read(SESSION, "k")).value == 2


async def test_erasure_status_reports_layers_and_waits(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path / "d", auto_purge="off") as store:
        async with memory_client(store) as tools:
            await tools.ok("memory_write", key="k", value="v")
            forgotten = await tools.ok("memory_forget", key="k")
            assert forgotten["state"] == "shredded" and forgotten["verified"] is False
            status = await tools.ok("erasure_status", request_id=forgotten["request_id"])
            assert status["state"] == "shredded" and status["layers"]["keys"]["state"] == "done"
            assert status["gaps"], "an unverified request names its gaps"
            waited = await tools.ok("erasure_status", request_id=forgotten["request_id"], wait_seconds=30)
            assert waited["state"] == "verified" and waited["verified"] and waited["gaps"] == []
            assert waited["layers"]["scan"]["evidence"]["matches"] == 0
            assert (await tools.refused("erasure_status", request_id="er_" + "0" * 24)).startswith(
                "not found"
            )


async def test_operational_forget_is_never_reported_as_erasure(mcp_store: cenotaph.Store) -> None:
    async with memory_client(mcp_store) as tools:
        await tools.ok("memory_write", key="k", value="v")
        result = await tools.call("memory_forget", key="k", mode="operational")
        forgotten = result.structured_content
        assert forgotten["mode"] == "operational" and forgotten["verified"] is False
        assert "never reported as an erasure" in result.content[0].text  # type: ignore[union-attr]
        assert (await tools.ok("memory_read", key="k"))["found"] is False
        status = await tools.ok("erasure_status", request_id=forgotten["request_id"], wait_seconds=5)
        assert status["verified"] is False and any("operational" in g for g in status["gaps"])


BAD_CALLS = [
    ("memory_write", {"value": 1}, "key"),
    ("memory_write", {"key": "k"}, "value"),
    ("memory_write", {"key": "", "value": 1}, "key"),
    ("memory_write", {"key": "k\n", "value": 1}, "key"),
    ("memory_write", {"key": 5, "value": 1}, "key"),
    ("memory_write", {"key": "k", "value": 1, "ttl_seconds": 0}, "ttl_seconds"),
    ("memory_write", {"key": "k", "value": 1, "ttl_seconds": "soon"}, "ttl_seconds"),
    ("memory_write", {"key": "k", "value": 1, "base_version": -1}, "base_version"),
    ("memory_write", {"key": "k", "value": 1, "derived_from": "abc"}, "derived_from"),
    ("memory_write", {"key": "k", "value": "x" * (1 << 20)}, "limit"),
    ("memory_write", {"key": "k", "value": 1, "scope": "not a scope"}, "scope"),
    ("memory_write", {"key": "k", "value": 1, "scope": ""}, "scope"),
    ("memory_read", {}, "key"),
    ("memory_read", {"key": "k", "scope": 7}, "scope"),
    ("memory_search", {"query": ""}, "query"),
    ("memory_search", {"query": "x", "k": 0}, "k"),
    ("memory_search", {"query": "x", "k": 100000}, "k"),
    ("memory_list", {"include_descendants": "maybe"}, "include_descendants"),
    ("memory_forget", {"mode": "gentle"}, "mode"),
    ("memory_forget", {"key": "k", "scope": "tenant:acme//user:alice"}, "scope"),
    ("erasure_status", {}, "request_id"),
    ("erasure_status", {"request_id": "er_x", "wait_seconds": -1}, "wait_seconds"),
    ("erasure_status", {"request_id": "../../etc/passwd"}, "erasure request"),
    ("no_such_tool", {}, "no_such_tool"),
]


@pytest.mark.parametrize(("tool", "arguments", "named"), BAD_CALLS, ids=[f"{t}-{n}" for t, _, n in BAD_CALLS])
async def test_bad_arguments_are_one_line_tool_errors(
    mcp_store: cenotaph.Store, tool: str, arguments: dict[str, Any], named: str
) -> None:
    async with memory_client(mcp_store) as tools:
        text = await tools.refused(tool, **arguments)
        assert named.lower() in text.lower()
        assert "input_value" not in text and "errors.pydantic.dev" not in text
        assert (await tools.ok("memory_list"))["records"] == []  # nothing was written


async def test_an_internal_error_says_only_its_type(
    mcp_store: cenotaph.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the secret value cardiology")

    async with memory_client(mcp_store) as tools:
        monkeypatch.setattr(mcp_store, "list", broken)
        text = await tools.refused("memory_list")
    assert "RuntimeError" in text and "cardiology" not in text and "internal error" in text


async def test_a_storage_failure_is_a_tool_error(
    mcp_store: cenotaph.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def locked(*args: object, **kwargs: object) -> None:
        raise cenotaph.StorageError("the database is locked; retry")

    async with memory_client(mcp_store) as tools:
        monkeypatch.setattr(mcp_store, "write_many", locked)
        text = await tools.refused("memory_write", key="k", value=1)
    assert text.startswith("the store failed, nothing was changed")


async def test_a_connection_that_read_too_much_cannot_write(mcp_store: cenotaph.Store) -> None:
    mcp_store.write_many([{"scope": SESSION, "key": f"k{i}", "value": i} for i in range(1025)])
    async with memory_client(mcp_store) as tools:
        assert len((await tools.ok("memory_list"))["records"]) == 1025
        text = await tools.refused("memory_write", key="summary", value="of everything")
        assert "1024" in text and "new connection" in text
    async with memory_client(mcp_store) as fresh:
        await fresh.ok("memory_write", key="summary", value="a new connection has read nothing")


async def test_tools_keep_working_in_a_second_connection(mcp_store: cenotaph.Store) -> None:
    async def use(tools: Tools) -> None:
        await tools.ok("memory_write", key="k", value="v")
        assert (await tools.ok("memory_read", key="k"))["found"]

    for _ in range(2):
        async with memory_client(mcp_store) as tools:
            await use(tools)
    async with memory_client(mcp_store, mode="legacy") as legacy:  # the 2025 handshake era too
        await use(legacy)
