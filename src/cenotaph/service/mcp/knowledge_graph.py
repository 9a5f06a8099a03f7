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

from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from cenotaph.store import Store

from .confinement import Confinement
from .connections import ConnectionRegistry
from .graph import Entity, KnowledgeGraph, Relation
from .kg_schemas import KG_TOOLS
from .server import CenotaphMCPServer, build_tool, text_result

__all__ = ["GRAPH_URI", "KnowledgeGraphTools", "knowledge_graph_server"]

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
    def __init__(self, graph: KnowledgeGraph) -> None:
        self.graph = graph

    def create_entities(self, entities: list[EntityIn]) -> Annotated[CallToolResult, EntitiesOut]:
        created = self.graph.create_entities(
            [Entity(e.name, e.entityType, tuple(e.observations)) for e in entities]
        )
        shown = [e.to_json() for e in created]
        return _printed(shown, {"entities": shown})

    def create_relations(self, relations: list[RelationIn]) -> Annotated[CallToolResult, RelationsOut]:
        created = self.graph.create_relations([r.relation() for r in relations])
        shown = [r.to_json() for r in created]
        return _printed(shown, {"relations": shown})

    def add_observations(self, observations: list[ObservationsIn]) -> Annotated[CallToolResult, ResultsOut]:
        added = self.graph.add_observations([(o.entityName, o.contents) for o in observations])
        shown = [{"entityName": name, "addedObservations": new} for name, new in added]
        return _printed(shown, {"results": shown})

    def delete_entities(self, entityNames: list[str]) -> Annotated[CallToolResult, DoneOut]:
        return _done("Entities", self.graph.delete_entities(entityNames))

    def delete_observations(self, deletions: list[DeletionIn]) -> Annotated[CallToolResult, DoneOut]:
        return _done(
            "Observations",
            self.graph.delete_observations([(d.entityName, d.observations) for d in deletions]),
        )

    def delete_relations(self, relations: list[RelationIn]) -> Annotated[CallToolResult, DoneOut]:
        return _done("Relations", self.graph.delete_relations([r.relation() for r in relations]))

    def read_graph(self) -> Annotated[CallToolResult, GraphOut]:
        return _graph(*self.graph.view().graph())

    def search_nodes(self, query: str) -> Annotated[CallToolResult, GraphOut]:
        return _graph(*self.graph.view().search(query))

    def open_nodes(self, names: list[str]) -> Annotated[CallToolResult, GraphOut]:
        return _graph(*self.graph.view(names).graph(set(names)))

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


def knowledge_graph_server(store: Store, confinement: Confinement) -> CenotaphMCPServer:
    """The ``knowledge-graph`` profile's server: the graph lives under the prefix."""
    graph = KnowledgeGraph(store, confinement.prefix)
    server = CenotaphMCPServer(
        "cenotaph-knowledge-graph",
        instructions=(
            "A knowledge graph memory (entities, observations, relations). Deleting an entity erases it, "
            "its observations and every relation touching it."
        ),
        tools=KnowledgeGraphTools(graph).tools(),
        registry=lambda: ConnectionRegistry(store, confinement.scope),
    )

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
