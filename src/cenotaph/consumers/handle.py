"""A consumer's handle: reads and exports through it are recorded as what the consumer took."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ..errors import InvalidValueError
from ..model import Record
from .feed import ConsumerEvent, ConsumerInfo
from .registry import Registry

__all__ = ["Consumer"]


class _Source(Protocol):
    """What a consumer reads through (the store)."""

    def read(self, scope: str, key: str, *, fallthrough: bool = True) -> Record | None: ...
    def get(self, record_id: str) -> Record | None: ...
    def list(self, scope: str, *, include_descendants: bool = False) -> builtins.list[Record]: ...
    def export_subject(self, subject: str) -> dict[str, Any]: ...


class Consumer:
    """A registered downstream consumer. Give it what it takes through :meth:`read`, :meth:`get`,
    :meth:`list` and :meth:`export_subject` (the store records record ids and versions, never
    values); it lists the erasures it must carry out with :meth:`events` and answers each with
    :meth:`acknowledge`."""

    def __init__(self, source: _Source, registry: Registry, info: ConsumerInfo) -> None:
        self._source = source
        self._registry = registry
        self.info = info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def name(self) -> str:
        return self.info.name

    def __repr__(self) -> str:
        return f"Consumer(id={self.id!r}, name={self.name!r})"

    def read(self, scope: str, key: str, *, fallthrough: bool = True) -> Record | None:
        record = self._source.read(scope, key, fallthrough=fallthrough)
        if record is not None:
            self._registry.took(self.id, [(record.id, record.version)])
        return record

    def get(self, record_id: str) -> Record | None:
        record = self._source.get(record_id)
        if record is not None:
            self._registry.took(self.id, [(record.id, record.version)])
        return record

    def list(self, scope: str, *, include_descendants: bool = False) -> builtins.list[Record]:
        records = self._source.list(scope, include_descendants=include_descendants)
        self._registry.took(self.id, [(r.id, r.version) for r in records])
        return records

    def export_subject(self, subject: str) -> dict[str, Any]:
        export = self._source.export_subject(subject)
        self.took([*export["records"], *export["derived_records"]])
        return export

    def took(self, records: Iterable[Record | Mapping[str, Any]]) -> None:
        """Record that this consumer was given ``records`` (Records, or their ``to_dict()``), for a
        surface that read them on its behalf (the server, under the consumer's key)."""
        taken = [
            (r.id, r.version) if isinstance(r, Record) else (str(r["id"]), int(r["version"])) for r in records
        ]
        self._registry.took(self.id, taken)

    def events(self, *, pending_only: bool = True) -> builtins.list[ConsumerEvent]:
        """The erasures this consumer must carry out (``pending_only=False``: acknowledged ones too)."""
        if type(pending_only) is not bool:
            raise InvalidValueError("pending_only must be True or False")
        return self._registry.events(self.id, pending_only=pending_only)

    def acknowledge(self, request_id: str, evidence: Mapping[str, Any] | None = None) -> ConsumerEvent:
        """Record this consumer's statement that it deleted what the request's event named. The
        evidence is its own word (a flat JSON object), stored and put in the certificate as given."""
        return self._registry.acknowledge(self.id, request_id, {} if evidence is None else evidence)
