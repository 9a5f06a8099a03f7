"""The knowledge-graph profile against the reference MCP memory server's behaviour.

The first part is the reference's own test suite (``src/memory/__tests__/knowledge-graph.test.ts``
of modelcontextprotocol/servers, MIT/Apache-2.0), rewritten case by case to go through the MCP
tools with the SDK's Client instead of calling ``KnowledgeGraphManager`` directly. Its "file
persistence" cases become persistence across a reopened store; the JSONL-format cases live in
``test_mcp_kg_files.py``. Then what the reference lacks: deletes are erasures, re-creating is
refused only after somebody else's forget.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.mcp.mcp_kit import USER, Tools, dump, find_canary, graph_client

import cenotaph
from cenotaph.scope import Scope
from cenotaph.service.mcp.graph import KnowledgeGraph

pytestmark = pytest.mark.anyio

REFERENCE = json.loads((Path(__file__).with_name("reference_tools.json")).read_text(encoding="utf-8"))[
    "tools"
]


def person(name: str, *observations: str, kind: str = "person") -> dict[str, Any]:
    return {"name": name, "entityType": kind, "observations": list(observations)}


def knows(source: str, target: str, kind: str = "knows") -> dict[str, Any]:
    return {"from": source, "to": target, "relationType": kind}


async def graph(tools: Tools) -> dict[str, Any]:
    return await tools.ok("read_graph")


async def test_the_tool_list_is_the_references(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        listed = (await tools.client.list_tools()).tools
    ours = {t.name: t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed}
    assert list(ours) == [t["name"] for t in REFERENCE]
    for theirs in REFERENCE:
        mine = ours[theirs["name"]]
        for field in ("title", "description", "inputSchema", "outputSchema", "annotations"):
            assert mine[field] == theirs[field], (theirs["name"], field)


async def test_the_graph_resource_is_the_references(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice", "engineer")])
        await tools.ok("create_relations", relations=[knows("Alice", "Acme", "works_at")])
        resources = (await tools.client.list_resources()).resources
        assert [(r.name, str(r.uri), r.mime_type, r.title) for r in resources] == [
            ("knowledge-graph", "memory://knowledge-graph", "application/json", "Knowledge Graph")
        ]
        contents = (await tools.client.read_resource("memory://knowledge-graph")).contents
    assert json.loads(contents[0].text) == {  # type: ignore[union-attr]
        "entities": [person("Alice", "engineer")],
        "relations": [knows("Alice", "Acme", "works_at")],
    }


# -- createEntities ---------------------------------------------------------------------
async def test_should_create_new_entities(mcp_store: cenotaph.Store) -> None:
    entities = [person("Alice", "works at Acme Corp"), person("Bob", "likes programming")]
    async with graph_client(mcp_store) as tools:
        result = await tools.call("create_entities", entities=entities)
        assert result.structured_content == {"entities": entities}
        assert json.loads(result.content[0].text) == entities  # type: ignore[union-attr]
        assert result.content[0].text == json.dumps(entities, indent=2)  # type: ignore[union-attr]
        assert len((await graph(tools))["entities"]) == 2


async def test_should_not_create_duplicate_entities(mcp_store: cenotaph.Store) -> None:
    entities = [person("Alice", "works at Acme Corp")]
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=entities)
        assert await tools.ok("create_entities", entities=entities) == {"entities": []}
        assert len((await graph(tools))["entities"]) == 1


async def test_should_handle_empty_entity_arrays(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        assert await tools.ok("create_entities", entities=[]) == {"entities": []}


# -- createRelations --------------------------------------------------------------------
async def test_should_create_new_relations(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice"), person("Bob")])
        assert await tools.ok("create_relations", relations=[knows("Alice", "Bob")]) == {
            "relations": [knows("Alice", "Bob")]
        }
        assert len((await graph(tools))["relations"]) == 1


async def test_should_not_create_duplicate_relations(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice"), person("Bob")])
        await tools.ok("create_relations", relations=[knows("Alice", "Bob")])
        assert await tools.ok("create_relations", relations=[knows("Alice", "Bob")]) == {"relations": []}
        assert len((await graph(tools))["relations"]) == 1


async def test_should_handle_empty_relation_arrays(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        assert await tools.ok("create_relations", relations=[]) == {"relations": []}


# -- addObservations --------------------------------------------------------------------
async def test_should_add_observations_to_existing_entities(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice", "works at Acme Corp")])
        result = await tools.ok(
            "add_observations",
            observations=[{"entityName": "Alice", "contents": ["likes coffee", "has a dog"]}],
        )
        assert result == {
            "results": [{"entityName": "Alice", "addedObservations": ["likes coffee", "has a dog"]}]
        }
        alice = (await graph(tools))["entities"][0]
        assert alice["observations"] == ["works at Acme Corp", "likes coffee", "has a dog"]


async def test_should_not_add_duplicate_observations(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice", "works at Acme Corp")])
        await tools.ok(
            "add_observations", observations=[{"entityName": "Alice", "contents": ["likes coffee"]}]
        )
        result = await tools.ok(
            "add_observations",
            observations=[{"entityName": "Alice", "contents": ["likes coffee", "has a dog"]}],
        )
        assert result["results"][0]["addedObservations"] == ["has a dog"]
        assert len((await graph(tools))["entities"][0]["observations"]) == 3


async def test_should_throw_error_for_non_existent_entity(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice")])
        text = await tools.refused(
            "add_observations",
            observations=[
                {"entityName": "Alice", "contents": ["added before the missing one?"]},
                {"entityName": "NonExistent", "contents": ["some observation"]},
            ],
        )
        assert text == "Entity with name NonExistent not found"  # the reference's words
        assert (await graph(tools))["entities"][0]["observations"] == []  # and nothing was added


# -- deleteEntities ---------------------------------------------------------------------
async def test_should_delete_entities(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice"), person("Bob")])
        result = await tools.call("delete_entities", entityNames=["Alice"])
        assert result.structured_content == {"success": True, "message": "Entities deleted successfully"}
        assert result.content[0].text == "Entities deleted successfully"  # type: ignore[union-attr]
        assert [e["name"] for e in (await graph(tools))["entities"]] == ["Bob"]


async def test_should_cascade_delete_relations_when_deleting_entities(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice"), person("Bob"), person("Charlie")])
        await tools.ok("create_relations", relations=[knows("Alice", "Bob"), knows("Bob", "Charlie")])
        await tools.ok("delete_entities", entityNames=["Bob"])
        after = await graph(tools)
        assert len(after["entities"]) == 2 and after["relations"] == []


async def test_should_handle_deleting_non_existent_entities(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        assert (await tools.ok("delete_entities", entityNames=["NonExistent"]))["success"] is True
        assert (await graph(tools))["entities"] == []
    assert mcp_store.erasures() == []  # nothing to forget, no tombstone


# -- deleteObservations -----------------------------------------------------------------
async def test_should_delete_observations_from_entities(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice", "works at Acme Corp", "likes coffee")])
        done = await tools.ok(
            "delete_observations", deletions=[{"entityName": "Alice", "observations": ["likes coffee"]}]
        )
        assert done == {"success": True, "message": "Observations deleted successfully"}
        assert (await graph(tools))["entities"][0]["observations"] == ["works at Acme Corp"]


async def test_should_handle_deleting_from_non_existent_entities(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        deletion = [{"entityName": "NonExistent", "observations": ["some observation"]}]
        assert (await tools.ok("delete_observations", deletions=deletion))["success"] is True
        assert (await graph(tools))["entities"] == []


# -- deleteRelations --------------------------------------------------------------------
async def test_should_delete_specific_relations(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice"), person("Bob")])
        await tools.ok(
            "create_relations", relations=[knows("Alice", "Bob"), knows("Alice", "Bob", "works_with")]
        )
        done = await tools.ok("delete_relations", relations=[knows("Alice", "Bob")])
        assert done == {"success": True, "message": "Relations deleted successfully"}
        assert (await graph(tools))["relations"] == [knows("Alice", "Bob", "works_with")]


# -- readGraph --------------------------------------------------------------------------
async def test_should_return_empty_graph_when_nothing_was_stored(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        result = await tools.call("read_graph")
        assert result.structured_content == {"entities": [], "relations": []}
        assert result.content[0].text == json.dumps({"entities": [], "relations": []}, indent=2)  # type: ignore[union-attr]


async def test_should_return_complete_graph_with_entities_and_relations(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice", "works at Acme Corp")])
        await tools.ok("create_relations", relations=[knows("Alice", "Alice", "self")])
        assert await graph(tools) == {
            "entities": [person("Alice", "works at Acme Corp")],
            "relations": [knows("Alice", "Alice", "self")],
        }


# -- searchNodes ------------------------------------------------------------------------
async def searchable(tools: Tools) -> None:
    await tools.ok(
        "create_entities",
        entities=[
            person("Alice", "works at Acme Corp", "likes programming"),
            person("Bob", "works at TechCo"),
            person("Acme Corp", "tech company", kind="company"),
        ],
    )
    await tools.ok(
        "create_relations",
        relations=[knows("Alice", "Acme Corp", "works_at"), knows("Bob", "Acme Corp", "competitor")],
    )


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("Alice", ["Alice"]),  # by entity name
        ("company", ["Acme Corp"]),  # by entity type
        ("programming", ["Alice"]),  # by observation content
        ("ALICE", ["Alice"]),  # case insensitive
        ("Acme", ["Alice", "Acme Corp"]),
        ("NonExistent", []),
    ],
)
async def test_search_nodes(mcp_store: cenotaph.Store, query: str, names: list[str]) -> None:
    async with graph_client(mcp_store) as tools:
        await searchable(tools)
        result = await tools.ok("search_nodes", query=query)
        assert [e["name"] for e in result["entities"]] == names


async def test_should_include_relations_where_at_least_one_endpoint_matches(
    mcp_store: cenotaph.Store,
) -> None:
    async with graph_client(mcp_store) as tools:
        await searchable(tools)
        assert len((await tools.ok("search_nodes", query="Acme"))["relations"]) == 2
        alice = await tools.ok("search_nodes", query="Alice")
        assert alice["relations"] == [knows("Alice", "Acme Corp", "works_at")]
        assert (await tools.ok("search_nodes", query="NonExistent"))["relations"] == []


# -- openNodes --------------------------------------------------------------------------
async def openable(tools: Tools) -> None:
    await tools.ok("create_entities", entities=[person("Alice"), person("Bob"), person("Charlie")])
    await tools.ok("create_relations", relations=[knows("Alice", "Bob"), knows("Bob", "Charlie")])


@pytest.mark.parametrize(
    ("names", "entities", "relations"),
    [
        (["Alice", "Bob"], ["Alice", "Bob"], [("Alice", "Bob"), ("Bob", "Charlie")]),
        (["Bob"], ["Bob"], [("Alice", "Bob"), ("Bob", "Charlie")]),
        (["Alice"], ["Alice"], [("Alice", "Bob")]),  # outgoing to a node not opened
        (["Charlie"], ["Charlie"], [("Bob", "Charlie")]),  # incoming from a node not opened
        (["NonExistent"], [], []),
        ([], [], []),
    ],
)
async def test_open_nodes(
    mcp_store: cenotaph.Store, names: list[str], entities: list[str], relations: list[tuple[str, str]]
) -> None:
    async with graph_client(mcp_store) as tools:
        await openable(tools)
        result = await tools.ok("open_nodes", names=names)
        assert [e["name"] for e in result["entities"]] == entities
        assert [(r["from"], r["to"]) for r in result["relations"]] == relations


# -- persistence ------------------------------------------------------------------------
async def test_should_persist_data_across_server_instances(tmp_path: Path) -> None:
    with cenotaph.open(tmp_path / "d") as store:
        async with graph_client(store) as tools:
            await tools.ok("create_entities", entities=[person("Alice", "persistent data")])
    with cenotaph.open(tmp_path / "d") as reopened:
        async with graph_client(reopened) as tools:
            assert (await graph(tools))["entities"] == [person("Alice", "persistent data")]


async def test_results_carry_no_storage_fields(mcp_store: cenotaph.Store) -> None:
    """The reference strips its file's ``type`` field; ours has no record ids or versions."""
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice", "x"), person("Bob")])
        await tools.ok("create_relations", relations=[knows("Alice", "Bob")])
        for result in (
            await graph(tools),
            await tools.ok("search_nodes", query="Alice"),
            await tools.ok("open_nodes", names=["Alice", "Bob"]),
        ):
            for entity in result["entities"]:
                assert set(entity) == {"name", "entityType", "observations"}
            for relation in result["relations"]:
                assert set(relation) == {"from", "to", "relationType"}


async def test_separate_graphs_per_prefix(mcp_store: cenotaph.Store) -> None:
    async with (
        graph_client(mcp_store, prefix=USER) as alice,
        graph_client(mcp_store, prefix="tenant:acme/user:bob") as bob,
    ):
        await alice.ok("create_entities", entities=[person("Secret", "alice only")])
        assert await graph(bob) == {"entities": [], "relations": []}
        assert (await bob.ok("search_nodes", query="alice only"))["entities"] == []


# -- what the reference lacks -----------------------------------------------------------
async def test_a_deleted_entity_leaves_no_trace_in_any_tool_or_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    canary = "Zyxcanary-Quetzalcoatl"
    with cenotaph.open(data, auto_purge="off") as store:
        async with graph_client(store) as tools:
            await tools.ok(
                "create_entities", entities=[person(canary, f"{canary} has a rare disease"), person("Bob")]
            )
            await tools.ok(
                "create_relations",
                relations=[knows("Bob", canary), knows(canary, "Bob", "treats"), knows("Bob", "Bob", "self")],
            )
            # a relation to the canary written before the canary existed
            await tools.ok("create_relations", relations=[knows("Bob", f"{canary} junior")])
            await tools.ok("create_entities", entities=[person(f"{canary} junior")])
            done = await tools.ok("delete_entities", entityNames=[canary, f"{canary} junior"])
            assert done == {"success": True, "message": "Entities deleted successfully"}  # verified
            outputs = [
                dump(await graph(tools)),
                dump(await tools.ok("search_nodes", query=canary)),
                dump(await tools.ok("search_nodes", query="rare disease")),
                dump(await tools.ok("open_nodes", names=[canary, "Bob"])),
                (await tools.client.read_resource("memory://knowledge-graph")).contents[0].text,  # type: ignore[union-attr]
            ]
        assert not any(canary in out for out in outputs)
        assert await_graph_names(outputs[0]) == ["Bob"]
        assert json.loads(outputs[0])["relations"] == [knows("Bob", "Bob", "self")]
        for request in store.erasures():
            store.confirm_erasure(request.id)  # every delete verified by a scan
    assert find_canary(data, canary) == []
    assert find_canary(data, "rare disease") == []


def await_graph_names(dumped: str) -> list[str]:
    return [e["name"] for e in json.loads(dumped)["entities"]]


async def test_what_the_graph_deleted_can_be_created_again(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice", "a"), person("Bob")])
        await tools.ok("create_relations", relations=[knows("Alice", "Bob")])
        await tools.ok("delete_observations", deletions=[{"entityName": "Alice", "observations": ["a"]}])
        await tools.ok("add_observations", observations=[{"entityName": "Alice", "contents": ["a"]}])
        await tools.ok("delete_relations", relations=[knows("Alice", "Bob")])
        await tools.ok("create_relations", relations=[knows("Alice", "Bob")])
        await tools.ok("delete_entities", entityNames=["Alice"])
        assert await tools.ok("create_entities", entities=[person("Alice", "a", "b")]) == {
            "entities": [person("Alice", "a", "b")]
        }
        await tools.ok("create_relations", relations=[knows("Alice", "Bob")])
        assert await graph(tools) == {
            "entities": [person("Bob"), person("Alice", "a", "b")],
            "relations": [knows("Alice", "Bob")],
        }
    async with graph_client(mcp_store) as another:  # the graph's deletes are its own in any process
        await another.ok("delete_entities", entityNames=["Alice"])
        await another.ok("create_entities", entities=[person("Alice")])


async def test_an_entity_forgotten_outside_the_graph_is_not_created_again(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice", "a")])
        mcp_store.forget(USER)  # an operator forgets the whole user scope
        assert (await graph(tools))["entities"] == []
        text = await tools.refused("create_entities", entities=[person("Alice", "back again")])
        assert "outside this knowledge graph" in text
    assert mcp_store.list(USER, include_descendants=True) == []
    async with graph_client(mcp_store) as tools:
        mcp_store.forget_subject(USER)
        assert "outside this knowledge graph" in await tools.refused(
            "create_entities", entities=[person("Carol")]
        )


async def test_bad_arguments_are_one_line_tool_errors(mcp_store: cenotaph.Store) -> None:
    async with graph_client(mcp_store) as tools:
        for tool, arguments in (
            ("create_entities", {}),
            ("create_entities", {"entities": [{"name": "Alice"}]}),
            ("create_entities", {"entities": [{"name": 1, "entityType": "p", "observations": []}]}),
            ("create_relations", {"relations": [{"from": "A", "to": "B"}]}),
            ("add_observations", {"observations": [{"entityName": "A"}]}),
            ("delete_entities", {"entityNames": "Alice"}),
            ("delete_observations", {"deletions": [{"observations": []}]}),
            ("delete_relations", {"relations": [{}]}),
            ("search_nodes", {}),
            ("open_nodes", {"names": [1, 2]}),
        ):
            text = await tools.refused(tool, **arguments)
            assert text.startswith(f"invalid arguments for {tool}"), text
        assert await graph(tools) == {"entities": [], "relations": []}


async def test_names_of_any_length_or_character_work(mcp_store: cenotaph.Store) -> None:
    names = ["", "a/b/../c", "x" * 5000, "tab\tand\nnewline", "emoji 🧠", "tenant:acme/user:bob"]
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person(n, n) for n in names])
        await tools.ok("create_relations", relations=[knows(names[0], names[1])])
        assert [e["name"] for e in (await graph(tools))["entities"]] == names
        await tools.ok("delete_entities", entityNames=names[:2])
        assert [e["name"] for e in (await graph(tools))["entities"]] == names[2:]
        assert (await graph(tools))["relations"] == []
    assert mcp_store.list("tenant:acme/user:bob", include_descendants=True) == []


async def test_the_graph_reopens_its_own_deletes_only(mcp_store: cenotaph.Store) -> None:
    """The graph's deletes are forgets owned by the graph (the store's ownership rule, kept in the
    ledger): it re-creates what it deleted itself, never what an operator forgot, and a record
    planted where the graph once kept markers of its deletes changes nothing."""
    graph_home = KnowledgeGraph(mcp_store, Scope.parse(USER))
    async with graph_client(mcp_store) as tools:
        await tools.ok("create_entities", entities=[person("Alice", "a"), person("Bob")])
        await tools.ok("delete_entities", entityNames=["Bob"])
        operator = mcp_store.forget(graph_home._entity_scope("Alice").path)
        mcp_store.write(f"{USER}/kg:deletes", f"v{operator.version}", {"request_id": operator.id})
        assert "outside this knowledge graph" in await tools.refused(
            "create_entities", entities=[person("Alice")]
        )
        await tools.ok("create_entities", entities=[person("Bob")])  # the graph's own delete reopens
