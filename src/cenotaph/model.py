"""The public value types: records, hits, erasure status, reports, certificates."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

__all__ = [
    "BackupInfo",
    "Certificate",
    "ErasureRequest",
    "ErasureStatus",
    "JSONValue",
    "LayerStatus",
    "PurgeReport",
    "Record",
    "Retention",
    "RotationReport",
    "SearchHit",
    "ERASURE_STATES",
    "ErasureState",
    "Layer",
    "LayerState",
    "Mode",
    "canonical_json",
]

JSONValue = Any  # any value json.dumps accepts without a default hook


# The words of an erasure request, one enum each. A StrEnum member is its value: it compares
# equal to it, and JSON, the database and every message hold the same text as before.
class Mode(StrEnum):
    """What a forget does: ``compliance`` erases (keys destroyed, purged, verified);
    ``operational`` only hides, then reclaims the rows."""

    COMPLIANCE = "compliance"
    OPERATIONAL = "operational"


class ErasureState(StrEnum):
    """How far a request has come; states only move forward on evidence."""

    TOMBSTONED = "tombstoned"  # operational requests stay here; a large forget until applied
    SHREDDED = "shredded"  # keys destroyed with the tombstone
    PURGED = "purged"  # rows deleted, WAL truncated, memory cleared
    VERIFIED = "verified"  # every owned file scanned clean, positive control found


class LayerState(StrEnum):
    DONE = "done"
    PENDING = "pending"
    FAILED = "failed"


class Layer(StrEnum):
    """The layers of a request's status, each with its state and evidence."""

    TOMBSTONE = "tombstone"
    KEYS = "keys"
    LINEAGE = "lineage"
    CACHES = "caches"
    ROWS = "rows"
    WAL = "wal"
    REPLICAS = "replicas"  # PostgreSQL: every streaming replica replayed past the purge
    INDEX = "index"
    SCAN = "scan"
    PAGES = "pages"  # PostgreSQL: the server's pages (dead tuples, index entries) scanned
    RECLAIM = "reclaim"  # operational: the hidden rows removed
    HORIZON = "horizon"  # in a status only, while a KEK epoch of the forget lives
    CONSUMERS = "consumers"  # in a status only, when a consumer took records the forget touches


ERASURE_STATES = tuple(ErasureState)


def canonical_json(obj: object) -> str:
    """Sorted keys, no insignificant whitespace, UTF-8 text (S6's canonical form)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True, slots=True)
class Record:
    """One value under ``(scope, key)``."""

    id: str
    scope: str
    key: str
    value: JSONValue
    version: int
    subjects: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None = None
    derived_from: tuple[str, ...] = ()
    metadata: Mapping[str, JSONValue] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "scope": self.scope,
            "key": self.key,
            "value": self.value,
            "version": self.version,
            "subjects": list(self.subjects),
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "derived_from": list(self.derived_from),
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A record a search found, and its ``score``: its similarity to the query (higher is closer)."""

    record: Record
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"record": self.record.to_dict(), "score": self.score}


@dataclass(frozen=True, slots=True)
class LayerStatus:
    """One layer of an erasure's evidence (``ErasureStatus.layers``): its ``state`` and what shows it."""

    state: LayerState
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "evidence": dict(self.evidence)}


@dataclass(frozen=True, slots=True)
class Retention:
    """Why a KEK epoch outlives rotation: who holds it (``holder`` ``"backup"`` or ``"erasure"``,
    with its ``id``), why, and what releases it. ``stuck`` is True when that holder cannot let go
    by waiting or purging (an erasure request that cannot verify until someone acts)."""

    epoch: int
    holder: Literal["backup", "erasure"]
    id: str
    reason: str
    release: str
    stuck: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "holder": self.holder,
            "id": self.id,
            "reason": self.reason,
            "release": self.release,
            "stuck": self.stuck,
        }


@dataclass(frozen=True, slots=True)
class ErasureStatus:
    """Where an erasure request stands: ``state``, per-layer evidence, horizon, gaps.

    ``stuck``: purging again cannot verify it; someone must act first (``next_step`` says what).
    ``next_step``: what moves it forward (``None`` once nothing is left to do).
    ``retained_by``: what keeps a KEK epoch of its horizon alive (registered backups, pending
    erasure requests' probes), each with why and what releases it."""

    state: str
    layers: Mapping[str, LayerStatus]
    horizon: datetime | None
    gaps: tuple[str, ...]
    stuck: bool = False
    next_step: str | None = None
    retained_by: tuple[Retention, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "layers": {name: layer.to_dict() for name, layer in sorted(self.layers.items())},
            "horizon": self.horizon.isoformat() if self.horizon else None,
            "gaps": list(self.gaps),
            "stuck": self.stuck,
            "next_step": self.next_step,
            "retained_by": [r.to_dict() for r in self.retained_by],
        }


@dataclass(frozen=True, slots=True)
class ErasureRequest:
    """The handle every forget returns; poll it with :meth:`status` or :meth:`wait`."""

    id: str
    version: int
    mode: Mode
    target_kind: str
    requested_at: datetime
    _status: Callable[[str], ErasureStatus] = field(repr=False, compare=False)
    _wait: Callable[[str, float | None], ErasureStatus] = field(repr=False, compare=False)

    def status(self) -> ErasureStatus:
        return self._status(self.id)

    def wait(self, timeout: float | None = None) -> ErasureStatus:
        """Drive the request forward (purge) until verified or ``timeout`` seconds pass.

        Returns the status once verified (an operational request: once reclaimed), or when
        ``timeout`` passes. Raises ErasureNotProvableError, naming every gap and what to do, as
        soon as the request cannot verify by purging (``status().stuck``), and -- without a
        timeout -- when another connection's open read transaction has blocked WAL truncation
        for longer than the busy timeout (``CENOTAPH_BUSY_TIMEOUT_MS``, 30 s by default)."""
        return self._wait(self.id, timeout)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "version": self.version,
            "mode": self.mode,
            "target_kind": self.target_kind,
            "requested_at": self.requested_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What a purge did: each request's state after it, record rows ``reclaimed``, whether the WAL
    was truncated, and the verifying ``scan``'s evidence."""

    requests: Mapping[str, str]
    reclaimed: int
    wal_truncated: bool
    scan: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "reclaimed": self.reclaimed,
            "wal_truncated": self.wal_truncated,
            "scan": dict(self.scan),
        }


@dataclass(frozen=True, slots=True)
class BackupInfo:
    """A backup: its ``id`` (registered with the key provider), where it is, when it was taken,
    the KEK ``epochs`` its copy needs kept alive, and its size in ``bytes``."""

    id: str
    path: str
    created_at: datetime
    epochs: tuple[int, ...]
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "created_at": self.created_at.isoformat(),
            "epochs": list(self.epochs),
            "bytes": self.bytes,
        }


@dataclass(frozen=True, slots=True)
class RotationReport:
    """``retained`` says, for every epoch in ``retained_epochs``, who holds it, why, and what
    releases it."""

    new_epoch: int
    rewrapped: int
    destroyed_epochs: tuple[int, ...]
    retained_epochs: tuple[int, ...]
    retained: tuple[Retention, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "new_epoch": self.new_epoch,
            "rewrapped": self.rewrapped,
            "destroyed_epochs": list(self.destroyed_epochs),
            "retained_epochs": list(self.retained_epochs),
            "retained": [r.to_dict() for r in self.retained],
        }


@dataclass(frozen=True, slots=True)
class Certificate:
    """A signed, content-free erasure certificate (S6). ``fields`` includes ``signature``."""

    fields: Mapping[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]

    @property
    def signature(self) -> str:
        return str(self.fields["signature"])

    def to_dict(self) -> dict[str, Any]:
        copy: dict[str, Any] = json.loads(self.to_json())  # a deep copy
        return copy

    def to_json(self) -> str:
        return canonical_json(dict(self.fields))
