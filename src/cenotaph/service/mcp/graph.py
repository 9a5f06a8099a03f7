"""A knowledge graph (entities, observations, relations) kept as cenotaph records.

The reference MCP memory server keeps a graph in one JSONL file, rewritten whole on every call;
here every item is its own record under the graph's ``home`` scope, so two processes writing
at once lose nothing, and a delete is a compliance forget:

- entity ``E``: scope ``home/kg-entity:<h(E)>``, key ``entity``, value ``{name, entityType}``;
  each observation ``o`` of it: same scope, key ``obs:<h(o)>``, value ``o``. Deleting ``E``
  forgets that scope (its subtree), so the entity and all its observations go in one forget.
- relation: scope ``home/kg:relations``, key ``rel:<h(from, to, relationType)>``, value
  ``{from, to, relationType}``, written ``derived_from`` the records of the entities it joins
  (those that exist), so forgetting either entity forgets the relation in the same transaction
  (W3). A relation naming an entity that did not exist when it was written is forgotten by its
  own key when that entity is deleted.
- every delete is a forget with the graph as its owner (``knowledge-graph:<home>``, kept by the
  store as a token). Creating again what the graph itself deleted takes a reauthorization token
  the store issues only for that owner's forgets; a forget made outside the graph (an operator's,
  another agent's, a subject erasure) is refused, however often the graph deletes the same item.

``h`` is SHA-256 (hex, 128 bits): names of any length or character become valid scope ids and
keys. Like every scope and key, they are stored encrypted and looked up by HMAC token.
Order is creation order (record versions), as the reference keeps its file's order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cenotaph import Scope, Store
from cenotaph.errors import DerivedFromForgottenError, ForgottenError
from cenotaph.model import ErasureRequest, Record

from .refusals import Refused

__all__ = ["Entity", "GraphView", "KnowledgeGraph", "Relation"]

ENTITY_KIND = "kg-entity"
ENTITY_KEY = "entity"
_WRITE_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class Entity:
    name: str
    entity_type: str
    observations: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "entityType": self.entity_type, "observations": list(self.observations)}


@dataclass(frozen=True, slots=True)
class Relation:
    source: str
    target: str
    relation_type: str

    def to_json(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target, "relationType": self.relation_type}


def _h(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass
class _EntityState:
    record: Record
    entity_type: str
    observations: list[str] = field(default_factory=list)


@dataclass
class GraphView:
    """The graph as read at one moment: entities (with their record) and relations."""

    entities: dict[str, _EntityState]
    relations: dict[Relation, Record]

    def graph(self, names: set[str] | None = None) -> tuple[list[Entity], list[Relation]]:
        """Every entity (or those named), and the relations touching any of them."""
        entities = [
            Entity(name, s.entity_type, tuple(s.observations))
            for name, s in self.entities.items()
            if names is None or name in names
        ]
        if names is None:
            return entities, list(self.relations)
        kept = {e.name for e in entities}
        return entities, [r for r in self.relations if r.source in kept or r.target in kept]

    def search(self, query: str) -> tuple[list[Entity], list[Relation]]:
        """The reference's search: a case-insensitive substring of the name, type or an observation."""
        q = query.lower()
        matched = {
            name
            for name, s in self.entities.items()
            if q in name.lower() or q in s.entity_type.lower() or any(q in o.lower() for o in s.observations)
        }
        return self.graph(matched)


class KnowledgeGraph:
    """The knowledge graph under ``home``, over ``store`` (see the module docstring)."""

    def __init__(self, store: Store, home: Scope) -> None:
        self.store = store
        self.home = home
        self._relations = home.child("kg", "relations")
        self._owner = "knowledge-graph:" + home.path

    def _entity_scope(self, name: str) -> Scope:
        return self.home.child(ENTITY_KIND, _h(name))

    @staticmethod
    def _obs_key(content: str) -> str:
        return "obs:" + _h(content)

    @staticmethod
    def _rel_key(r: Relation) -> str:
        return "rel:" + _h(json.dumps([r.source, r.target, r.relation_type], ensure_ascii=False))

    # -- reading -------------------------------------------------------------------------
    def view(self, names: Iterable[str] | None = None, *, relations: bool = True) -> GraphView:
        """The whole graph, or only the entities named (and, with ``relations``, every relation):
        a call that names its entities reads only their scopes, not the graph."""
        if names is None:
            return self._parse(self.store.list(self.home.path, include_descendants=True), None)
        wanted = dict.fromkeys(names)
        records = [r for n in wanted for r in self.store.list(self._entity_scope(n).path)]
        if relations:
            records += self.store.list(self._relations.path)
        return self._parse(records, set(wanted))

    def _parse(self, records: list[Record], names: set[str] | None) -> GraphView:
        records.sort(key=lambda r: r.version)  # creation order, as the reference keeps its file
        entities: dict[str, _EntityState] = {}
        observations: dict[str, list[str]] = {}
        found: dict[Relation, Record] = {}
        entity_prefix = f"{self.home.path}/{ENTITY_KIND}:"
        for record in records:
            if record.scope == self._relations.path and isinstance(record.value, dict):
                relation = _relation_from(record.value)
                if relation is not None:
                    found[relation] = record
            elif record.scope.startswith(entity_prefix) and "/" not in record.scope[len(entity_prefix) :]:
                if record.key == ENTITY_KEY and isinstance(record.value, dict):
                    name, kind = record.value.get("name"), record.value.get("entityType")
                    if isinstance(name, str) and isinstance(kind, str) and (names is None or name in names):
                        entities[name] = _EntityState(record, kind)
                elif record.key.startswith("obs:") and isinstance(record.value, str):
                    observations.setdefault(record.scope, []).append(record.value)
        for state in entities.values():
            state.observations = observations.get(state.record.scope, [])
        return GraphView(entities, found)

    # -- creating ------------------------------------------------------------------------
    def create_entities(self, entities: Sequence[Entity]) -> list[Entity]:
        """Create the entities whose name is new (a name given twice counts once); returns them."""
        existing = self.view((e.name for e in entities), relations=False).entities
        created: dict[str, Entity] = {}
        for e in entities:
            if e.name not in existing and e.name not in created:
                created[e.name] = Entity(e.name, e.entity_type, tuple(dict.fromkeys(e.observations)))
        items: list[dict[str, Any]] = []
        for e in created.values():
            scope = self._entity_scope(e.name).path
            items.append(
                {"scope": scope, "key": ENTITY_KEY, "value": {"name": e.name, "entityType": e.entity_type}}
            )
            items.extend({"scope": scope, "key": self._obs_key(o), "value": o} for o in e.observations)
        self._write(items)
        return list(created.values())

    def add_observations(self, additions: Sequence[tuple[str, Sequence[str]]]) -> list[tuple[str, list[str]]]:
        """Add each entity's new observations; an unknown entity refuses the whole call, as the
        reference does, and nothing is added."""
        entities = self.view((name for name, _ in additions), relations=False).entities
        for name, _ in additions:
            if name not in entities:
                raise Refused(f"Entity with name {name} not found")
        results: list[tuple[str, list[str]]] = []
        items: list[dict[str, Any]] = []
        for name, contents in additions:
            state = entities[name]
            added = [c for c in dict.fromkeys(contents) if c not in state.observations]
            state.observations.extend(added)  # a second addition to the same entity sees the first
            items.extend({"scope": state.record.scope, "key": self._obs_key(c), "value": c} for c in added)
            results.append((name, added))
        self._write(items)
        return results

    def create_relations(self, relations: Sequence[Relation]) -> list[Relation]:
        """Create the relations that are new; each is derived from the entities it joins."""
        for attempt in range(_WRITE_ATTEMPTS):
            view = self.view(n for r in relations for n in (r.source, r.target))
            new = [r for r in dict.fromkeys(relations) if r not in view.relations]
            items = [
                {
                    "scope": self._relations.path,
                    "key": self._rel_key(r),
                    "value": r.to_json(),
                    "derived_from": [
                        view.entities[n].record.id
                        for n in dict.fromkeys((r.source, r.target))
                        if n in view.entities
                    ],
                }
                for r in new
            ]
            try:
                self._write(items)
                return new
            except DerivedFromForgottenError:
                if attempt == _WRITE_ATTEMPTS - 1:
                    raise  # an entity keeps being deleted under us: say so rather than loop
        raise AssertionError("unreachable")

    def _write(self, items: list[dict[str, Any]]) -> list[Record]:
        """One atomic batch. Items refused by a forget this graph made are written again with a
        reauthorization token each; anyone else's forget refuses the batch."""
        if not items:
            return []
        through = self.store.known_version()  # a delete that returns after this is not reopened
        try:
            return self.store.write_many(items)
        except DerivedFromForgottenError:
            raise
        except ForgottenError:
            pass
        for item in items:
            if self.store.forgets_blocking(item["scope"], item["key"]):
                item["reauthorization"] = self._reauthorize(item["scope"], item["key"], through)
        return self.store.write_many(items)

    def _reauthorize(self, scope: str, key: str, through: int) -> str:
        try:
            return self.store.reauthorize(scope, key, owner=self._owner, through=through)
        except ForgottenError:
            raise Refused(
                "this item was forgotten outside this knowledge graph (by an operator, another agent "
                "or a data subject's erasure); creating it again needs an operator's reauthorization"
            ) from None

    # -- deleting ------------------------------------------------------------------------
    def delete_entities(self, names: Sequence[str]) -> bool:
        """Forget each entity with its observations and every relation touching it. True when
        every erasure verified."""
        doomed = set(names)
        view = self.view(names, relations=False)
        requests = [
            self.store.forget(self._entity_scope(n).path, owner=self._owner)
            for n in dict.fromkeys(names)
            if n in view.entities
        ]
        # relations derived from a forgotten entity went with it; the rest name it but predate it
        left = self.view(()).relations
        requests += [
            self.store.forget(self._relations.path, self._rel_key(r), owner=self._owner)
            for r in left
            if r.source in doomed or r.target in doomed
        ]
        return self._finish(requests)

    def delete_observations(self, deletions: Sequence[tuple[str, Sequence[str]]]) -> bool:
        entities = self.view((name for name, _ in deletions), relations=False).entities
        requests = [
            self.store.forget(entities[name].record.scope, self._obs_key(o), owner=self._owner)
            for name, contents in deletions
            if name in entities
            for o in dict.fromkeys(contents)
            if o in entities[name].observations
        ]
        return self._finish(requests)

    def delete_relations(self, relations: Sequence[Relation]) -> bool:
        present = self.view(()).relations
        requests = [
            self.store.forget(self._relations.path, self._rel_key(r), owner=self._owner)
            for r in dict.fromkeys(relations)
            if r in present
        ]
        return self._finish(requests)

    def _finish(self, requests: list[ErasureRequest]) -> bool:
        """Purge once, and say whether every forget verified."""
        if not requests:
            return True
        if self.store.purge_mode != "sync":  # else each forget purged before it returned
            self.store.purge()
        return all(r.status().state == "verified" for r in requests)


def _relation_from(value: dict[str, Any]) -> Relation | None:
    source, target, kind = value.get("from"), value.get("to"), value.get("relationType")
    if isinstance(source, str) and isinstance(target, str) and isinstance(kind, str):
        return Relation(source, target, kind)
    return None
