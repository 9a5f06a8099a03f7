"""The knowledge-graph profile side by side with the real reference server (node).

The same calls go to ``@modelcontextprotocol/server-memory`` (pinned, installed with npm into a
cache directory outside the repository) and to ``cenotaph mcp --profile knowledge-graph``, both
over stdio through the SDK's Client; results must be identical, text and structured content.
Skipped when node or npm is missing or the package cannot be installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from tests.mcp.mcp_kit import USER, stdio_params

pytestmark = pytest.mark.anyio

REFERENCE = "@modelcontextprotocol/server-memory"
VERSION = "2026.8.31"
CACHE = Path(os.environ.get("CENOTAPH_REFERENCE_CACHE", Path.home() / ".cache" / "cenotaph-tests"))


def reference_entry() -> Path:
    """The reference server's entry point, installed on first use."""
    target = CACHE / f"server-memory-{VERSION}"
    entry = target / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
    if entry.is_file():
        return entry
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("node and npm are needed to run the reference server")
    target.mkdir(parents=True, exist_ok=True)
    installed = subprocess.run(
        ["npm", "install", "--prefix", str(target), "--no-audit", "--no-fund", f"{REFERENCE}@{VERSION}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if installed.returncode != 0 or not entry.is_file():
        pytest.skip(f"could not install {REFERENCE}@{VERSION} with npm")
    return entry


def reference_params(memory_file: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command="node",
        args=[str(reference_entry())],
        env={**os.environ, "MEMORY_FILE_PATH": str(memory_file)},
    )


def p(name: str, *obs: str, kind: str = "person") -> dict[str, Any]:
    return {"name": name, "entityType": kind, "observations": list(obs)}


def r(source: str, target: str, kind: str = "knows") -> dict[str, Any]:
    return {"from": source, "to": target, "relationType": kind}


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_graph", {}),
    (
        "create_entities",
        {"entities": [p("Alice", "works at Acme Corp", "likes programming"), p("Bob", "works at TechCo")]},
    ),
    ("create_entities", {"entities": [p("Alice", "again"), p("Acme Corp", "tech company", kind="company")]}),
    ("create_entities", {"entities": []}),
    (
        "create_relations",
        {"relations": [r("Alice", "Acme Corp", "works_at"), r("Bob", "Acme Corp", "competitor")]},
    ),
    (
        "create_relations",
        {"relations": [r("Alice", "Acme Corp", "works_at"), r("Alice", "Bob"), r("Alice", "Nobody")]},
    ),
    (
        "add_observations",
        {"observations": [{"entityName": "Alice", "contents": ["likes coffee", "works at Acme Corp"]}]},
    ),
    (
        "add_observations",
        {
            "observations": [
                {"entityName": "Bob", "contents": ["x"]},
                {"entityName": "Ghost", "contents": ["y"]},
            ]
        },
    ),
    ("search_nodes", {"query": "acme"}),
    ("search_nodes", {"query": "COMPANY"}),
    ("search_nodes", {"query": "nothing matches this"}),
    ("open_nodes", {"names": ["Bob", "Nobody"]}),
    ("open_nodes", {"names": []}),
    (
        "delete_observations",
        {"deletions": [{"entityName": "Alice", "observations": ["likes coffee", "never there"]}]},
    ),
    ("delete_observations", {"deletions": [{"entityName": "Ghost", "observations": ["y"]}]}),
    ("delete_relations", {"relations": [r("Bob", "Acme Corp", "competitor"), r("No", "Such")]}),
    ("read_graph", {}),
    ("delete_entities", {"entityNames": ["Acme Corp", "Ghost"]}),
    ("read_graph", {}),
    ("create_entities", {"entities": [p("Acme Corp", "re-founded", kind="company")]}),
    ("create_relations", {"relations": [r("Alice", "Acme Corp", "works_at")]}),
    ("add_observations", {"observations": [{"entityName": "Alice", "contents": ["likes coffee"]}]}),
    ("open_nodes", {"names": ["Alice"]}),
    ("read_graph", {}),
]


async def run_calls(params: StdioServerParameters) -> list[tuple[bool, str, Any]]:
    async with Client(params) as client:
        results = []
        for name, arguments in CALLS:
            result = await client.call_tool(name, arguments)
            results.append((bool(result.is_error), result.content[0].text, result.structured_content))  # type: ignore[union-attr]
        resource = await client.read_resource("memory://knowledge-graph")
        results.append((False, resource.contents[0].text, None))  # type: ignore[union-attr]
        return results


async def test_the_same_calls_give_the_same_results(cli_data: Path, tmp_path: Path) -> None:
    theirs = await run_calls(reference_params(tmp_path / "memory.jsonl"))
    ours = await run_calls(stdio_params(cli_data, "--profile", "knowledge-graph", "--prefix", USER))
    assert len(ours) == len(theirs) == len(CALLS) + 1
    for (name, arguments), mine, reference in zip([*CALLS, ("resource", {})], ours, theirs, strict=True):
        assert mine == reference, (name, arguments)


async def test_where_we_differ_on_purpose(cli_data: Path, tmp_path: Path) -> None:
    """A name or an observation given twice in one call: the reference stores both copies (two
    entities called Alice; an observation listed twice), we store one (see the README)."""
    twice = [
        ("create_entities", {"entities": [p("Alice", "o", "o"), p("Alice", "other")]}),
        ("read_graph", {}),
    ]
    outcomes = []
    for params in (
        reference_params(tmp_path / "memory.jsonl"),
        stdio_params(cli_data, "--profile", "knowledge-graph", "--prefix", USER),
    ):
        async with Client(params) as client:
            for name, arguments in twice:
                outcomes.append((await client.call_tool(name, arguments)).structured_content)
    reference_graph, our_graph = outcomes[1], outcomes[3]
    assert [e["name"] for e in reference_graph["entities"]] == ["Alice", "Alice"]
    assert our_graph["entities"] == [p("Alice", "o")]
