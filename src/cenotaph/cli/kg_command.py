"""``cenotaph kg import`` / ``kg export``: the reference MCP memory server's JSONL file, in and out.

A graph lives under a scope (``--prefix``), as ``cenotaph mcp --profile knowledge-graph`` keeps
it. Import adds what is new (an entity whose name exists is skipped, as ``create_entities``
skips it), so running it twice changes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO

import click

from cenotaph import Scope
from cenotaph.service.mcp.graph import KnowledgeGraph
from cenotaph.service.mcp.jsonl import dump_graph, parse_graph

from .options import DataLocation, data_option, open_existing_store
from .output import emit, table_option

__all__ = ["kg"]

BATCH = 500  # entities (with their observations) or relations per transaction

_PREFIX = click.option(
    "--prefix",
    metavar="SCOPE",
    required=True,
    help="The scope the graph lives under (the --prefix of `cenotaph mcp --profile knowledge-graph`).",
)


@click.group("kg")
def kg() -> None:
    """Move a knowledge graph in or out, in the reference MCP memory server's JSONL format."""


@kg.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@_PREFIX
@data_option
@table_option
def import_graph(file: IO[str], prefix: str, data: DataLocation, table: bool) -> None:
    """Import FILE (a memory.jsonl of the reference server; - for stdin) into the graph.

    Entities, their observations and relations; an entity whose name is already in the graph is
    skipped. Prints what was created.
    """
    try:
        text = file.read()
    except UnicodeDecodeError:
        raise click.BadParameter(
            "not UTF-8 text; a memory file is UTF-8 JSON lines", param_hint="FILE"
        ) from None
    entities, relations = parse_graph(text)
    with open_existing_store(data) as store:
        graph = KnowledgeGraph(store, Scope.parse(prefix))
        created = sum(
            len(graph.create_entities(entities[i : i + BATCH])) for i in range(0, len(entities), BATCH)
        )
        linked = sum(
            len(graph.create_relations(relations[i : i + BATCH])) for i in range(0, len(relations), BATCH)
        )
    emit(
        {
            "entities": {"read": len(entities), "created": created},
            "relations": {"read": len(relations), "created": linked},
        },
        table=table,
    )


@kg.command("export")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path), default="-")
@_PREFIX
@data_option
def export_graph(file: Path, prefix: str, data: DataLocation) -> None:
    """Write the graph to FILE (default: stdout) as the reference server's memory.jsonl.

    The file holds the graph in plain text: keep it as carefully as the data it came from.
    """
    with open_existing_store(data) as store:
        entities, relations = KnowledgeGraph(store, Scope.parse(prefix)).view().graph()
    text = dump_graph(entities, relations)
    if str(file) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        file.write_text(text, encoding="utf-8")
