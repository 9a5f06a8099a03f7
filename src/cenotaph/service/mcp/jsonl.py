"""The reference knowledge-graph server's file format: one JSON object per line.

``{"type":"entity","name":...,"entityType":...,"observations":[...]}`` and
``{"type":"relation","from":...,"to":...,"relationType":...}``, entities first, compact JSON
(``JSON.stringify``), lines joined by ``\\n``. Blank lines are skipped on reading, as the
reference does; a line that is not such an object is refused with its line number (the
reference would ignore an unknown ``type``, and so do we).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from cenotaph.errors import InvalidValueError

from .graph import Entity, Relation

__all__ = ["dump_graph", "parse_graph"]


def parse_graph(text: str) -> tuple[list[Entity], list[Relation]]:
    entities: list[Entity] = []
    relations: list[Relation] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            raise InvalidValueError(
                f"line {number} is not JSON; a memory file has one JSON object per line"
            ) from None
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "entity":
            entities.append(_entity(item, number))
        elif kind == "relation":
            relations.append(_relation(item, number))
    return entities, relations


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _entity(item: dict[str, Any], number: int) -> Entity:
    name, kind, observations = item.get("name"), item.get("entityType"), item.get("observations", [])
    if not (isinstance(name, str) and isinstance(kind, str) and _strings(observations)):
        raise InvalidValueError(
            f"line {number}: an entity needs a string name and entityType and a list of string observations"
        )
    return Entity(name, kind, tuple(observations))


def _relation(item: dict[str, Any], number: int) -> Relation:
    source, target, kind = item.get("from"), item.get("to"), item.get("relationType")
    if not (isinstance(source, str) and isinstance(target, str) and isinstance(kind, str)):
        raise InvalidValueError(f"line {number}: a relation needs string from, to and relationType")
    return Relation(source, target, kind)


def dump_graph(entities: Iterable[Entity], relations: Iterable[Relation]) -> str:
    lines = [_line({"type": "entity", **e.to_json()}) for e in entities]
    lines += [_line({"type": "relation", **r.to_json()}) for r in relations]
    return "\n".join(lines)


def _line(item: dict[str, Any]) -> str:
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))
