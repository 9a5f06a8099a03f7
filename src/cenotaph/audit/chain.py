"""The audit hash chain: append-only, content-free, anchored outside the database.

>>> first = chain_entry(GENESIS, 1, "2025-01-01T00:00:00+00:00", "forget", {"request_id": "r1", "version": 7})
>>> second = chain_entry(first.head, 2, "2025-01-01T00:00:05+00:00", "purge", {"request_id": "r1"})
>>> verify_chain([first, second], anchor=first.head, anchor_seq=1) == second.head
True

Each entry's ``head`` is ``sha256(prev_head || canonical_json({seq, at, event, fields}))`` in hex, where
``prev_head`` is the previous entry's head as 64 ASCII hex characters (:data:`GENESIS` for the first entry)
and the JSON is UTF-8 encoded. Storing entries is the backend's job; this module only builds and checks the
chain.

**Content-free.** ``fields`` hold request ids, HMAC tokens, versions, counts and epoch numbers only — never
a key, scope id, subject id, value, unsalted hash or vector. This rule is the caller's to keep.

**What the chain proves.** Recomputing the chain detects any edit, deletion or reordering that the editor
did not also re-hash. Someone who can write the database can re-hash, so the head is also recorded in the
key provider's ledger (the *anchor*): :func:`verify_chain` then detects a rewrite or truncation of
everything up to the anchored sequence number. Entries after the anchor are only as trustworthy as the
database until the next anchor.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import InvalidValueError, StorageError
from ..model import canonical_json

__all__ = [
    "GENESIS",
    "AuditEntry",
    "chain_entry",
    "entry_from_dict",
    "entry_to_dict",
    "verified_requests",
    "verify_chain",
]

GENESIS = "0" * 64
_HEAD = re.compile(r"[0-9a-f]{64}")
_EVENT = re.compile(r"[a-z][a-z0-9_.-]{0,63}")  # a short name, so an event cannot smuggle content
_TAMPERED = "the audit log was altered; restore it from a trusted copy and investigate"
_ENTRY_KEYS = frozenset({"seq", "at", "event", "fields", "prev", "head"})


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One link of the chain; ``fields`` are content-free (see the module docstring)."""

    seq: int
    at: str  # ISO-8601, UTC
    event: str  # "forget", "purge", "verify", "attest", "backup", "restore", "rotate", ...
    fields: Mapping[str, Any]
    prev: str
    head: str


def chain_entry(prev_head: str, seq: int, at: str, event: str, fields: Mapping[str, Any]) -> AuditEntry:
    """The entry that follows ``prev_head`` (use :data:`GENESIS` for ``seq`` 1)."""
    _check_new_entry(prev_head, seq, at, event)
    try:
        # Detached from the caller, and exactly what a JSON round trip through storage gives back.
        plain = _plain_json(canonical_json(dict(fields)))
        head = _link_hash(prev_head, seq, at, event, plain)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidValueError(
            "audit fields must be plain JSON (str, int, float, bool, None, lists, dicts)"
        ) from exc
    return AuditEntry(seq, at, event, plain, prev_head, head)


def verify_chain(
    entries: Iterable[AuditEntry], *, anchor: str | None = None, anchor_seq: int | None = None
) -> str:
    """Check the whole chain, oldest first, and return its head (:data:`GENESIS` when empty).

    ``anchor`` is the head the key provider's ledger recorded at ``anchor_seq``; give both or neither
    (``anchor_seq`` 0 means the empty log). Raises :class:`StorageError` naming the first bad sequence number.
    """
    if (anchor is None) != (anchor_seq is None):
        raise InvalidValueError("give anchor and anchor_seq together, or neither")
    if anchor_seq is not None and (isinstance(anchor_seq, bool) or anchor_seq < 0):
        raise InvalidValueError("anchor_seq must be a sequence number >= 0")
    head, seq = GENESIS, 0
    _check_anchor(seq, head, anchor, anchor_seq)
    for entry in entries:
        seq += 1
        head = _check_link(entry, seq, head)
        _check_anchor(seq, head, anchor, anchor_seq)
    if anchor_seq is not None and anchor_seq > seq:
        raise StorageError(
            f"audit entry {seq + 1} is missing: the log ends at {seq} but the ledger anchored entry "
            f"{anchor_seq}, so it was truncated; {_TAMPERED}"
        )
    return head


def entry_to_dict(entry: AuditEntry) -> dict[str, Any]:
    """The entry as plain JSON for storage; :func:`entry_from_dict` reads it back."""
    return {
        "seq": entry.seq,
        "at": entry.at,
        "event": entry.event,
        "fields": _plain_json(canonical_json(dict(entry.fields))),
        "prev": entry.prev,
        "head": entry.head,
    }


def entry_from_dict(data: Mapping[str, Any]) -> AuditEntry:
    """Read a stored entry back; raise :class:`StorageError` if its shape is wrong (hashes: verify_chain)."""
    seq = data.get("seq") if isinstance(data, Mapping) else None
    label = f"audit entry {seq}" if isinstance(seq, int) else "an audit entry"
    if not isinstance(data, Mapping) or set(data) != _ENTRY_KEYS:
        raise StorageError(f"{label} does not have exactly the keys {sorted(_ENTRY_KEYS)}; {_TAMPERED}")
    typed = (
        isinstance(seq, int)
        and not isinstance(seq, bool)
        and all(isinstance(data[name], str) for name in ("at", "event", "prev", "head"))
        and isinstance(data["fields"], Mapping)
    )
    if not typed:
        raise StorageError(f"{label} has a field of the wrong type; {_TAMPERED}")
    return AuditEntry(
        data["seq"], data["at"], data["event"], dict(data["fields"]), data["prev"], data["head"]
    )


def _check_new_entry(prev_head: str, seq: int, at: str, event: str) -> None:
    if not isinstance(prev_head, str) or not _HEAD.fullmatch(prev_head):
        raise InvalidValueError("prev_head must be the previous entry's head (64 lowercase hex) or GENESIS")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise InvalidValueError("seq must be an integer >= 1 (the first entry is 1)")
    if not isinstance(event, str) or not _EVENT.fullmatch(event):
        raise InvalidValueError("event must be a short lowercase name such as 'forget' or 'purge'")
    if not _is_utc_timestamp(at):
        raise InvalidValueError("at must be an ISO-8601 UTC timestamp, e.g. datetime.now(UTC).isoformat()")


def _is_utc_timestamp(at: object) -> bool:
    if not isinstance(at, str):
        return False
    try:
        offset = datetime.fromisoformat(at).utcoffset()
    except ValueError:
        return False
    return offset is not None and not offset


def _check_link(entry: AuditEntry, seq: int, prev_head: str) -> str:
    """Check the entry expected at ``seq`` after ``prev_head``; return its head."""
    if entry.seq != seq:
        raise StorageError(
            f"audit entry {seq} is missing or out of order (found entry {entry.seq}); {_TAMPERED}"
        )
    if entry.prev != prev_head:
        raise StorageError(f"audit entry {seq} does not link to entry {seq - 1}; {_TAMPERED}")
    try:
        expected = _link_hash(prev_head, entry.seq, entry.at, entry.event, entry.fields)
    except (TypeError, ValueError, RecursionError) as exc:
        raise StorageError(f"audit entry {seq} holds a value that is not plain JSON; {_TAMPERED}") from exc
    if entry.head != expected:
        raise StorageError(f"audit entry {seq} does not match its hash; {_TAMPERED}")
    return expected


def _check_anchor(seq: int, head: str, anchor: str | None, anchor_seq: int | None) -> None:
    if anchor_seq == seq and head != anchor:
        raise StorageError(
            f"audit entry {seq} differs from the head the key provider's ledger anchored; {_TAMPERED}"
        )


def _link_hash(prev_head: str, seq: int, at: str, event: str, fields: Mapping[str, Any]) -> str:
    body = canonical_json({"seq": seq, "at": at, "event": event, "fields": dict(fields)})
    return hashlib.sha256(prev_head.encode("ascii") + body.encode("utf-8")).hexdigest()


def _plain_json(canonical: str) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(canonical)
    return parsed


def verified_requests(raw_entries: Iterable[str]) -> set[str]:
    """Request ids of every ``verify`` entry whose scan verified its request (from a log that
    was verified against the ledger: a request row saying verified is no proof)."""
    found: set[str] = set()
    for raw in raw_entries:
        entry = entry_from_dict(json.loads(raw))
        if entry.event == "verify" and entry.fields.get("verified") is True:
            found.add(str(entry.fields.get("request_id")))
    return found
