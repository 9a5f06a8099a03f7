"""Sealing and opening records: the only code that turns rows into :class:`Record` and back.

Payload layout (AES-256-GCM under the record's content key, aad = record id and version)::

    {"v": <value JSON>, "r": {"s": scope, "k": key, "u": subjects, "m": metadata,
                             "d": derived_from, "c": created_at, "x": expires_at}}

What decides whether a row may be served is authenticated (S9): its version is in the AAD (an
edited version column no longer opens; rows sealed before that opened with the id alone and
still do), and its expiry is read from the payload, never from the ``expires_at`` column,
which only indexes the sweep.

The lineage row keeps the record's subjects sealed under its lineage key, so a derived record can
inherit them after the source expired, and nobody can once the source is compliance-forgotten.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from .backends import ops
from .backends.base import LineageRow, RecordRow, ScopeKeyRow, Txn
from .crypto.aead import KEY_BYTES, NONCE_BYTES, Sealer
from .crypto.keys import KeyChain, content_key_of, group_part, lineage_key
from .jsoncodec import compact_encoder
from .model import Record

__all__ = [
    "RANDOM_BYTES",
    "OpenedRecord",
    "RecordCrypto",
    "SealedRecord",
    "is_visible",
    "new_record",
    "record_aad",
    "sealed_expiry",
]

_SUBJECTS_AAD = b"cenotaph-subjects/1"
# the fresh randomness of one sealed record: its id, content and lineage seeds, four nonces
RANDOM_BYTES = 16 + 2 * KEY_BYTES + 4 * NONCE_BYTES
_COMPACT = compact_encoder(ensure_ascii=True, allow_nan=True)


def is_visible(row: RecordRow, now: float) -> bool:
    """A row may be materialized: not hidden by a forget, key not destroyed, not expired at ``now``."""
    return (
        row.hidden_version is None
        and row.wrapped is not None
        and (row.expires_at is None or row.expires_at > now)
    )


def record_aad(record_id: str, version: int) -> bytes:
    """What a record's payload is bound to: its id and its version."""
    return f"{record_id}@{version}".encode()


_EXPIRY = b',"x":'


def sealed_expiry(payload: bytes) -> float | None:
    """The expiry a payload was sealed with (``"x"`` is the last field of ``"r"``, which is the
    last field of the payload, so the last occurrence is it: a value or metadata string holding
    the same bytes comes earlier)."""
    raw = payload[payload.rindex(_EXPIRY) + len(_EXPIRY) : -2]
    return None if raw == b"null" else float(raw)


def _ts(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


_ATOMS = frozenset({str, int, float, bool, type(None)})


_RECORD_FIELDS = tuple(Record.__dataclass_fields__)
if _RECORD_FIELDS != (
    "id", "scope", "key", "value", "version", "subjects", "created_at", "expires_at", "derived_from", "metadata"
):  # fmt: skip
    raise RuntimeError("Record's fields changed: update new_record")
_SETTERS = tuple(getattr(Record, name).__set__ for name in _RECORD_FIELDS)
_s0, _s1, _s2, _s3, _s4, _s5, _s6, _s7, _s8, _s9 = _SETTERS
_blank = object.__new__


def new_record(
    record_id: str,
    scope: str,
    key: str,
    value: Any,
    version: int,
    subjects: tuple[str, ...],
    created_at: datetime,
    expires_at: datetime | None,
    derived_from: tuple[str, ...],
    metadata: Any,
) -> Record:
    """``Record(...)`` by its slots (what its frozen ``__init__`` does one ``object.__setattr__``
    at a time, at twice the cost): every read hands out a new one."""
    r = _blank(Record)
    _s0(r, record_id)
    _s1(r, scope)
    _s2(r, key)
    _s3(r, value)
    _s4(r, version)
    _s5(r, subjects)
    _s6(r, created_at)
    _s7(r, expires_at)
    _s8(r, derived_from)
    _s9(r, metadata)
    return r


def _copy_json(value: Any) -> Any:
    """A deep copy of a JSON value (dicts, lists and atoms only), faster than ``copy.deepcopy``."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _ATOMS else _copy_json(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _ATOMS else _copy_json(v) for v in value]
    return value


class OpenedRecord:
    """A decrypted record as the caches keep it, never handed out itself.

    Every caller gets its own :class:`Record` from :meth:`record` (a deep copy of the value and
    metadata), so a caller that changes a returned value or its metadata changes nothing the
    store, or any other caller, sees.
    """

    __slots__ = ("_template", "expires_at", "id", "payload", "version")

    def __init__(
        self,
        record_id: str,
        version: int,
        expires_at: float | None,
        payload: bytes,
        template: Record | None = None,
    ) -> None:
        self.id = record_id
        self.version = version
        self.expires_at = expires_at
        self.payload = payload
        self._template = template  # parsed once; its value and metadata never leave

    def record(self) -> Record:
        t = self._template
        if t is None:
            t = self._template = self._parse()
        value = t.value
        metadata = t.metadata
        return new_record(
            t.id,
            t.scope,
            t.key,
            value if type(value) in _ATOMS else _copy_json(value),
            t.version,
            t.subjects,
            t.created_at,
            t.expires_at,
            t.derived_from,
            _copy_json(metadata) if metadata else {},
        )

    def _parse(self) -> Record:
        doc = json.loads(self.payload.decode())  # str: json.loads(bytes) sniffs the encoding first
        rest = doc["r"]
        return new_record(
            self.id,
            rest["s"],
            rest["k"],
            doc["v"],
            self.version,
            tuple(rest["u"]),
            datetime.fromtimestamp(rest["c"], UTC),
            _ts(rest["x"]),
            tuple(rest["d"]),
            rest["m"],
        )


class SealedRecord:
    """A record ready to insert: its row, its lineage row and its keys (kept for the cache)."""

    __slots__ = ("lineage", "lineage_key", "opened", "row")

    def __init__(self, row: RecordRow, lineage: LineageRow, lineage_key: bytes, opened: OpenedRecord) -> None:
        self.row = row
        self.lineage = lineage
        self.lineage_key = lineage_key
        self.opened = opened


class RecordCrypto:
    """Derives record keys from the key hierarchy and seals/opens payloads."""

    def __init__(self, keys: KeyChain) -> None:
        self.keys = keys
        self._parents: dict[bytes, bytes | None] = {}
        self._last_created: tuple[float, datetime] = (0.0, datetime.fromtimestamp(0.0, UTC))
        self._last_subjects: tuple[list[str], bytes] = ([], b"[]")

    # -- key lookups (cached in the KeyChain) -----------------------------------------
    def scope_chain(self, txn: Txn, token: bytes) -> list[bytes] | None:
        """Unwrapped keys of the scope and all its ancestors, root first; None if any is destroyed."""
        chain: list[bytes] = []
        current: bytes | None = token
        fetched: dict[bytes, ScopeKeyRow] | None = None
        while current is not None:
            key = self.keys.scope_keys.get(current)
            if key is None or current not in self._parents:
                if fetched is None:  # the rest of the chain in one statement
                    fetched = txn.run(ops.ScopeChainRows(current))
                    row = fetched.get(current)
                elif current in fetched:
                    row = fetched[current]
                else:  # a parent cached before the rows moved: as it is now
                    row = txn.run(ops.ScopeRows([current])).get(current)
                if row is None:
                    return None
                self._parents[current] = None if row.parent is None else bytes(row.parent)
                key = self.keys.unwrap(row.wrapped, row.epoch)
                if key is None:
                    return None
                self.keys.scope_keys[current] = key
            chain.append(key)
            current = self._parents[current]
        chain.reverse()
        return chain

    def subject_keys(self, txn: Txn, tokens: Sequence[bytes]) -> list[bytes] | None:
        missing = [t for t in tokens if t not in self.keys.subject_keys]
        if missing:
            for token, (wrapped, epoch) in txn.run(ops.SubjectRows(missing)).items():
                key = self.keys.unwrap(wrapped, epoch)
                if key is not None:
                    self.keys.subject_keys[token] = key
        found = [self.keys.subject_keys.get(t) for t in tokens]
        return None if any(k is None for k in found) else [k for k in found if k is not None]

    def lineage_key(self, txn: Txn, record_id: str, _depth: int = 0) -> bytes | None:
        cached = self.keys.lineage_keys.get(record_id)
        if cached is not None:
            return cached
        row = txn.run(ops.Lineage([record_id])).get(record_id)
        if row is None or _depth > 10_000:
            return None
        return self.lineage_key_of(txn, row, _depth)

    def lineage_key_of(self, txn: Txn, row: LineageRow, _depth: int = 0) -> bytes | None:
        seed = self.keys.unwrap(row.wrapped, row.epoch)
        if seed is None:
            return None
        sources: list[bytes] = []
        for source in row.sources:
            key = self.lineage_key(txn, source, _depth + 1)
            if key is None:
                return None
            sources.append(key)
        key = lineage_key(seed, sources)
        self.keys.remember_lineage(row.record_id, key)
        return key

    def subjects_of(self, txn: Txn, row: LineageRow) -> list[str] | None:
        key = self.lineage_key_of(txn, row)
        if key is None or row.subjects is None:
            return None
        opened = Sealer(key).open(row.subjects, _SUBJECTS_AAD + row.record_id.encode())
        return None if opened is None else list(json.loads(opened))

    # -- sealing -------------------------------------------------------------------------
    def _subjects_json(self, subjects: Sequence[str]) -> bytes:
        """The JSON of a record's subject list (sealed in its lineage row); a batch's records of
        one scope share theirs: encoded once (the last one kept)."""
        last = self._last_subjects
        if last[0] != subjects:  # a list, as the write path passes them (a tuple never equals it)
            listed = list(subjects)
            last = self._last_subjects = (listed, _COMPACT(listed).encode())
        return last[1]

    def _created(self, at: float) -> datetime:
        """``at`` as a datetime; a batch seals every record at the same instant: made once."""
        last = self._last_created
        if last[0] != at:
            last = self._last_created = (at, datetime.fromtimestamp(at, UTC))
        return last[1]

    def seal(
        self,
        *,
        scope_path: str,
        key: str,
        value_json: bytes,
        version: int,
        group: bytes,
        subjects: Sequence[str],
        subject_tokens: Sequence[bytes],
        sources: Sequence[tuple[str, bytes]],
        metadata: dict[str, Any],
        created_at: float,
        expires_at: float | None,
        scope_token: bytes,
        key_token: bytes,
        material: bytes | None = None,
        value_copy: tuple[Any] | None = None,
    ) -> SealedRecord:
        """``group``: :func:`group_part` of the scope's and the subjects' keys (the same for a
        whole batch of one scope); ``material``: :data:`RANDOM_BYTES` fresh random bytes (a batch draws them for all of
        its records in one call); drawn here if not given; ``value_copy``: the value ``value_json``
        was encoded from when it is flat (``validation.flat_copy``), so it need not be parsed back."""
        if material is None:
            material = os.urandom(RANDOM_BYTES)
        # the id (random), the content seed, the lineage seed, then one nonce per seal
        record_id = material[:16].hex()
        content_seed, lineage_seed = material[16:48], material[48:80]
        n1, n2, n3, n4 = material[80:92], material[92:104], material[104:116], material[116:128]
        wrapped_content, wrapped_lineage, epoch = self.keys.wrap_two(content_seed, lineage_seed, n1, n2)
        lin_key = lineage_key(lineage_seed, [k for _, k in sources])
        ckey = content_key_of(content_seed, lin_key, group)
        derived_from = [s for s, _ in sources]
        rest = {
            "s": scope_path,
            "k": key,
            "u": list(subjects),
            "m": metadata,
            "d": derived_from,
            "c": created_at,
            "x": expires_at,
        }
        payload = b'{"v":' + value_json + b',"r":' + _COMPACT(rest).encode() + b"}"
        aad = record_id.encode()
        # positional, in the field order (keywords cost a dict a row)
        row = RecordRow(
            record_id,
            scope_token,
            key_token,
            version,
            expires_at,
            None,  # hidden_version
            wrapped_content,
            epoch,
            Sealer(ckey).seal_with(n3, payload, record_aad(record_id, version)),
        )
        lineage = LineageRow(
            record_id,
            scope_token,
            key_token,
            version,
            wrapped_lineage,
            epoch,
            b"".join(subject_tokens),
            Sealer(lin_key).seal_with(n4, self._subjects_json(subjects), _SUBJECTS_AAD + aad),
            tuple(derived_from),
        )
        # the template from what was sealed, without parsing the payload back: the value from
        # its own JSON (so it is exactly what a read returns); metadata only when empty (a
        # caller's nested metadata must not be shared), else parsed on first use
        template = (
            None
            if metadata
            else new_record(
                record_id,
                scope_path,
                key,
                json.loads(value_json.decode()) if value_copy is None else value_copy[0],
                version,
                tuple(subjects),
                self._created(created_at),
                _ts(expires_at),
                tuple(derived_from),
                {},
            )
        )
        opened = OpenedRecord(record_id, version, expires_at, payload, template)
        return SealedRecord(row, lineage, lin_key, opened)

    def _content_sealer(self, txn: Txn, row: RecordRow, lineage: LineageRow | None = None) -> Sealer | None:
        """The AEAD of a row's content key; ``None`` if any key it depends on was destroyed (S2)."""
        seed = self.keys.unwrap(row.wrapped, row.epoch)
        if seed is None:
            return None
        if lineage is None:
            lineage = txn.run(ops.Lineage([row.id])).get(row.id)
        if lineage is None:
            return None
        lin_key = self.lineage_key_of(txn, lineage)
        group = self.group(txn, row.scope_token, lineage.subject_tokens)
        if lin_key is None or group is None:
            return None
        return Sealer(content_key_of(seed, lin_key, group))

    def group(self, txn: Txn, scope_token: bytes, subject_tokens: bytes) -> bytes | None:
        """:func:`group_part` of a scope's key chain and a record's subjects' keys (cached until
        the keys are dropped); ``None`` if any of them was destroyed."""
        cache_key = scope_token + subject_tokens
        part = self.keys.groups.get(cache_key)
        if part is None:
            scope_keys = self.scope_chain(txn, scope_token)
            tokens = [subject_tokens[i : i + 32] for i in range(0, len(subject_tokens), 32)]
            subject_keys = self.subject_keys(txn, tokens)
            if scope_keys is None or subject_keys is None:
                return None
            part = group_part(scope_keys, subject_keys)
            self.keys.remember_group(cache_key, part)
        return part

    def open(self, txn: Txn, row: RecordRow, lineage: LineageRow | None = None) -> OpenedRecord | None:
        """Decrypt a row; ``None`` if any key it depends on was destroyed (S2)."""
        sealer = None if row.ciphertext is None else self._content_sealer(txn, row, lineage)
        if sealer is None or row.ciphertext is None:
            return None
        payload = sealer.open(row.ciphertext, record_aad(row.id, row.version))
        if payload is None:  # sealed before the version was bound (id only): still opens
            payload = sealer.open(row.ciphertext, row.id.encode())
        if payload is None:
            return None
        return OpenedRecord(row.id, row.version, sealed_expiry(payload), payload)
