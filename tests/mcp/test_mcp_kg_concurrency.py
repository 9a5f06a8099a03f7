"""Two knowledge-graph server processes on one data directory, writing at once: nothing is lost.

The reference server rewrites its whole file on every call, so two of them sharing it drop each
other's writes (``bench/bench_mcp.py`` shows it side by side). Here every entity, observation
and relation is its own record, and SQLite serialises the writers.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client
from tests.mcp.mcp_kit import USER, Tools, stdio_params

pytestmark = pytest.mark.anyio

PER_PROCESS = 25


async def writer(data: Path, tag: str) -> None:
    async with Client(stdio_params(data, "--profile", "knowledge-graph", "--prefix", USER)) as client:
        tools = Tools(client)
        for i in range(PER_PROCESS):
            name = f"{tag}-{i}"
            await tools.ok(
                "create_entities",
                entities=[{"name": name, "entityType": tag, "observations": [f"{name} born"]}],
            )
            await tools.ok(
                "add_observations", observations=[{"entityName": "Shared", "contents": [f"seen by {name}"]}]
            )
            await tools.ok(
                "create_relations", relations=[{"from": name, "to": "Shared", "relationType": "knows"}]
            )
            if i % 5 == 4:  # deletes race the other process's writes too
                await tools.ok("delete_entities", entityNames=[f"{tag}-{i - 1}"])


async def test_two_processes_writing_at_once_lose_nothing(cli_data: Path) -> None:
    params = stdio_params(cli_data, "--profile", "knowledge-graph", "--prefix", USER)
    async with Client(params) as client:
        await Tools(client).ok(
            "create_entities", entities=[{"name": "Shared", "entityType": "hub", "observations": []}]
        )
    async with anyio.create_task_group() as group:
        group.start_soon(writer, cli_data, "a")
        group.start_soon(writer, cli_data, "b")
    async with Client(params) as client:
        graph = await Tools(client).ok("read_graph")
    deleted = {f"{tag}-{i - 1}" for tag in "ab" for i in range(PER_PROCESS) if i % 5 == 4}
    expected = {f"{tag}-{i}" for tag in "ab" for i in range(PER_PROCESS)} - deleted
    names = {e["name"] for e in graph["entities"]}
    assert names == expected | {"Shared"}
    shared = next(e for e in graph["entities"] if e["name"] == "Shared")
    assert set(shared["observations"]) == {f"seen by {tag}-{i}" for tag in "ab" for i in range(PER_PROCESS)}
    assert {(r["from"], r["to"]) for r in graph["relations"]} == {(n, "Shared") for n in expected}
    for entity in graph["entities"]:
        if entity["name"] != "Shared":
            assert entity["observations"] == [f"{entity['name']} born"]
