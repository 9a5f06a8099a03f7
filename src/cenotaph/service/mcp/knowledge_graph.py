"""The ``knowledge-graph`` profile: a drop-in for the reference MCP memory server.

The same nine tools with the same published schemas (:mod:`.kg_schemas`), the same results --
``content`` is the JSON the reference prints (``JSON.stringify(result, null, 2)``) and
``structuredContent`` the same object -- over :class:`.graph.KnowledgeGraph`, so deletes are
compliance forgets and several processes may share one data directory. Connections are not
store sessions here: the graph's lineage is explicit (a relation is derived from the entities it
joins), and tainting every write with every ``read_graph`` would make one delete take the graph.

Where results differ from the reference's, it is on purpose (see the README): a name, an
observation or a relation given twice in one call is stored once, and a delete that cannot be
verified yet says so in its message.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from cenotaph import Store

from .confinement import Confinement
from .connections import ConnectionRegistry
from .graph import Entity, KnowledgeGraph, Relation
from .kg_schemas import KG_TOOLS
from .toolserver import CenotaphMCPServer, build_tool, connection_for, text_result

__all__ = ["GRAPH_URI", "KnowledgeGraphTools", "knowledge_graph_server"]

Ctx = Context[ConnectionRegistry, Any]
GRAPH_URI = "memory://knowledge-graph"  # the reference's resource: the whole graph as JSON


class EntityIn(BaseModel):
    name: str
    entityType: str
    observations: list[str]


class RelationIn(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    source: str = Field(alias="from")
    to: str
    relationType: str

    def relation(self) -> Relation:
        return Relation(self.source, self.to, self.relationType)


class ObservationsIn(BaseModel):
    entityName: str
    contents: list[str]


class DeletionIn(BaseModel):
    entityName: str
    observations: list[str]


class EntityOut(TypedDict):
    name: str
    entityType: str
    observations: list[str]


RelationOut = TypedDict("RelationOut", {"from": str, "to": str, "relationType": str})


class AddedOut(TypedDict):
    entityName: str
    addedObservations: list[str]


class EntitiesOut(TypedDict):
    entities: list[EntityOut]


class RelationsOut(TypedDict):
    relations: list[RelationOut]


class ResultsOut(TypedDict):
    results: list[AddedOut]


class DoneOut(TypedDict):
    success: bool
    message: str


class GraphOut(TypedDict):
    entities: list[EntityOut]
    relations: list[RelationOut]


def _printed(shown: Any, structured: dict[str, Any]) -> CallToolResult:
    return text_result(json.dumps(shown, indent=2, ensure_ascii=False), structured)


def _graph(entities: list[Entity], relations: list[Relation]) -> CallToolResult:
    graph = {"entities": [e.to_json() for e in entities], "relations": [r.to_json() for r in relations]}
    return _printed(graph, graph)


def _done(what: str, verified: bool) -> CallToolResult:
    message = (
        f"{what} deleted successfully"
        if verified
        else f"{what} deleted (forgotten and their keys destroyed; the erasure is not verified yet)"
    )
    return text_result(message, {"success": True, "message": message})


class KnowledgeGraphTools:
    """The nine tools over the store; each call works on the graph under its connection's
    prefix (the server's, or the narrower one an API key binds)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def graph(self, ctx: Context[Any, Any]) -> KnowledgeGraph:
        return KnowledgeGraph(self.store, connection_for(ctx).reach.prefix)

    def create_entities(self, ctx: Ctx, entities: list[EntityIn]) -> Annotated[CallToolResult, EntitiesOut]:
        created = self.graph(ctx).create_entities(
            [Entity(e.name, e.entityType, tuple(e.observations)) for e in entities]
        )
        shown = [e.to_json() for e in created]
        return _printed(shown, {"entities": shown})

    def create_relations(
        self, ctx: Ctx, relations: list[RelationIn]
    ) -> Annotated[CallToolResult, RelationsOut]:
        created = self.graph(ctx).create_relations([r.relation() for r in relations])
        shown = [r.to_json() for r in created]
        return _printed(shown, {"relations": shown})

    def add_observations(
        self, ctx: Ctx, observations: list[ObservationsIn]
    ) -> Annotated[CallToolResult, ResultsOut]:
        added = self.graph(ctx).add_observations([(o.entityName, o.contents) for o in observations])
        shown = [{"entityName": name, "addedObservations": new} for name, new in added]
        return _printed(shown, {"results": shown})

    def delete_entities(self, ctx: Ctx, entityNames: list[str]) -> Annotated[CallToolResult, DoneOut]:
        return _done("Entities", self.graph(ctx).delete_entities(entityNames))

    def delete_observations(
        self, ctx: Ctx, deletions: list[DeletionIn]
    ) -> Annotated[CallToolResult, DoneOut]:
        return _done(
            "Observations",
            self.graph(ctx).delete_observations([(d.entityName, d.observations) for d in deletions]),
        )

    def delete_relations(self, ctx: Ctx, relations: list[RelationIn]) -> Annotated[CallToolResult, DoneOut]:
        return _done("Relations", self.graph(ctx).delete_relations([r.relation() for r in relations]))

    def read_graph(self, ctx: Ctx) -> Annotated[CallToolResult, GraphOut]:
        return _graph(*self.graph(ctx).view().graph())

    def search_nodes(self, ctx: Ctx, query: str) -> Annotated[CallToolResult, GraphOut]:
        return _graph(*self.graph(ctx).view().search(query))

    def open_nodes(self, ctx: Ctx, names: list[str]) -> Annotated[CallToolResult, GraphOut]:
        return _graph(*self.graph(ctx).view(names).graph(set(names)))

    def tools(self) -> list[Tool]:
        return [
            build_tool(
                getattr(self, name),
                name=name,
                title=spec["title"],
                description=spec["description"],
                annotations=ToolAnnotations.model_validate(spec["annotations"]),
                input_schema=spec["inputSchema"],
                output_schema=spec["outputSchema"],
            )
            for name, spec in KG_TOOLS.items()
        ]


def knowledge_graph_server(
    store: Store, confinement: Confinement, *, keyed: bool = False
) -> CenotaphMCPServer:
    """The ``knowledge-graph`` profile's server: the graph lives under the prefix. ``keyed``:
    connections are bound by API keys (each key's prefix holds its graph); the reference's
    ``memory://knowledge-graph`` resource is then not offered (a static resource cannot know
    which key reads it)."""
    tools = KnowledgeGraphTools(store)
    server = CenotaphMCPServer(
        "cenotaph-knowledge-graph",
        instructions=(
            "A knowledge graph memory (entities, observations, relations). Deleting an entity erases it, "
            "its observations and every relation touching it."
        ),
        tools=tools.tools(),
        registry=lambda: ConnectionRegistry(store, confinement),
    )
    if keyed:
        return server
    graph = KnowledgeGraph(store, confinement.prefix)

    @server.resource(
        GRAPH_URI,
        name="knowledge-graph",
        title="Knowledge Graph",
        description="The full knowledge graph with all entities and relations",
        mime_type="application/json",
    )
    def knowledge_graph() -> str:
        entities, relations = graph.view().graph()
        shown = {"entities": [e.to_json() for e in entities], "relations": [r.to_json() for r in relations]}
        return json.dumps(shown, indent=2, ensure_ascii=False)

    return server
