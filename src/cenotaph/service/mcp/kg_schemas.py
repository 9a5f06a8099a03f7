"""The reference knowledge-graph server's nine tools as it publishes them: names, titles,
descriptions, annotations, input and output schemas (``@modelcontextprotocol/server-memory``,
whose zod schemas become JSON Schema draft-07). A client configured for the reference sees the
same tool list here; ``tests/mcp/reference_tools.json`` is the reference's own listing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KG_TOOLS", "KgTool"]

_DRAFT = "http://json-schema.org/draft-07/schema#"


def _string(description: str | None = None) -> dict[str, Any]:
    return {"type": "string", **({"description": description} if description else {})}


def _strings(description: str | None = None) -> dict[str, Any]:
    return {
        "type": "array",
        "items": {"type": "string"},
        **({"description": description} if description else {}),
    }


def _object(properties: dict[str, Any], *, closed: bool) -> dict[str, Any]:
    # zod objects accept unknown keys on input (and drop them); output schemas are strict
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        **({"additionalProperties": False} if closed else {}),
    }


def _entity(closed: bool) -> dict[str, Any]:
    return _object(
        {
            "name": _string("The name of the entity"),
            "entityType": _string("The type of the entity"),
            "observations": _strings("An array of observation contents associated with the entity"),
        },
        closed=closed,
    )


def _relation(closed: bool) -> dict[str, Any]:
    return _object(
        {
            "from": _string("The name of the entity where the relation starts"),
            "to": _string("The name of the entity where the relation ends"),
            "relationType": _string("The type of the relation"),
        },
        closed=closed,
    )


def _array(items: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    return {"type": "array", "items": items, **({"description": description} if description else {})}


def _schema(properties: dict[str, Any], *, closed: bool) -> dict[str, Any]:
    body = _object(properties, closed=closed)
    if not properties:
        del body["required"]
    return {"$schema": _DRAFT, **body}


_DONE = _schema({"success": {"type": "boolean"}, "message": {"type": "string"}}, closed=True)
_GRAPH = _schema({"entities": _array(_entity(True)), "relations": _array(_relation(True))}, closed=True)
_WRITE = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False, "openWorldHint": False}
_DELETE = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True, "openWorldHint": False}
_READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}


class KgTool(dict[str, Any]):
    """One published tool: name, title, description, inputSchema, outputSchema, annotations."""


def _tool(
    name: str,
    title: str,
    description: str,
    inputs: dict[str, Any],
    output: dict[str, Any],
    hints: dict[str, bool],
) -> KgTool:
    return KgTool(
        name=name,
        title=title,
        description=description,
        inputSchema=_schema(inputs, closed=False),
        outputSchema=output,
        annotations=hints,
    )


KG_TOOLS: dict[str, KgTool] = {
    t["name"]: t
    for t in (
        _tool(
            "create_entities",
            "Create Entities",
            "Create multiple new entities in the knowledge graph",
            {"entities": _array(_entity(False))},
            _schema({"entities": _array(_entity(True))}, closed=True),
            _WRITE,
        ),
        _tool(
            "create_relations",
            "Create Relations",
            "Create multiple new relations between entities in the knowledge graph. Relations should be in active voice",
            {"relations": _array(_relation(False))},
            _schema({"relations": _array(_relation(True))}, closed=True),
            _WRITE,
        ),
        _tool(
            "add_observations",
            "Add Observations",
            "Add new observations to existing entities in the knowledge graph",
            {
                "observations": _array(
                    _object(
                        {
                            "entityName": _string("The name of the entity to add the observations to"),
                            "contents": _strings("An array of observation contents to add"),
                        },
                        closed=False,
                    )
                )
            },
            _schema(
                {
                    "results": _array(
                        _object({"entityName": _string(), "addedObservations": _strings()}, closed=True)
                    )
                },
                closed=True,
            ),
            _WRITE,
        ),
        _tool(
            "delete_entities",
            "Delete Entities",
            "Delete multiple entities and their associated relations from the knowledge graph",
            {"entityNames": _strings("An array of entity names to delete")},
            _DONE,
            _DELETE,
        ),
        _tool(
            "delete_observations",
            "Delete Observations",
            "Delete specific observations from entities in the knowledge graph",
            {
                "deletions": _array(
                    _object(
                        {
                            "entityName": _string("The name of the entity containing the observations"),
                            "observations": _strings("An array of observations to delete"),
                        },
                        closed=False,
                    )
                )
            },
            _DONE,
            _DELETE,
        ),
        _tool(
            "delete_relations",
            "Delete Relations",
            "Delete multiple relations from the knowledge graph",
            {"relations": _array(_relation(False), "An array of relations to delete")},
            _DONE,
            _DELETE,
        ),
        _tool("read_graph", "Read Graph", "Read the entire knowledge graph", {}, _GRAPH, _READ),
        _tool(
            "search_nodes",
            "Search Nodes",
            "Search for nodes in the knowledge graph based on a query",
            {
                "query": _string(
                    "The search query to match against entity names, types, and observation content"
                )
            },
            _GRAPH,
            _READ,
        ),
        _tool(
            "open_nodes",
            "Open Nodes",
            "Open specific nodes in the knowledge graph by their names",
            {"names": _strings("An array of entity names to retrieve")},
            _GRAPH,
            _READ,
        ),
    )
}
