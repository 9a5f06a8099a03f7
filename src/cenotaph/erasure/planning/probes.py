"""Probes (S4): byte strings sampled from what a forget removes, kept sealed until verification.

Sampled inside the forget's transaction -- a large forget samples its records just before it,
outside the write lock, and its scope and subject keys inside -- and again when a forget is
replayed from the ledger: ciphertext windows of each destroyed record, its wrapped keys, the wrapped scope and subject
keys, and -- while the keys still exist -- the record's plaintext and vector bytes. They are
sealed under a random *probe key*, wrapped like every data key by a KEK epoch, the newest live
one of the forget plan's epochs (``probe_keys`` table), so a crashed purge can resume and still prove; blob and key are
deleted once the request verifies. A copy of the database taken while the request was pending
(a backup, a snapshot) holds the probes, which include plaintext windows: they die with that
epoch, which is one of the plan's epochs, so the horizon covers them. Rotation does not rewrap a
probe key (its epoch would then outlive the plan's); it keeps that epoch until the key is gone.

With the probes, the blob records what the forget *found* to erase (records holding ciphertext
or keys, and wrapped keys): a forget that found nothing -- a repeated erasure, a target the store
never held, a replay on a copy that never held it -- has nothing to probe, and verifies on a clean
scan and an empty target (``plan.remains``); one that found something must have probes. Sealed
with the probes, so editing the database cannot turn one kind into the other.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ...backends import ops
from ...backends.base import LineageRow, RecordRow, Txn
from ...crypto.aead import open_sealed, seal
from ...index.atrest import sealed_part
from ...ledger.plan import ForgetPlan
from ...model import Record
from ..proof.scanner import PROBE_MIN, probe_windows

__all__ = [
    "ProbeSample",
    "RecordSample",
    "open_probes",
    "sample_probes",
    "sample_reads",
    "sample_records",
    "seal_probes",
]

T = TypeVar("T")
Opener = Callable[[Txn, RecordRow, LineageRow | None], tuple[Record, bytes | None] | None]
_AAD = b"cenotaph-probes/1"
MAX_PROBES_PER_REQUEST = 4096
# records sampled per request, spread evenly over all it destroys: opening and embedding each one
# inside the forget's transaction was 84% of a 20k-record forget's lock time (bench_forget_lock)
MAX_SAMPLED_RECORDS = 1024


@dataclass(frozen=True)
class ProbeSample:
    """A request's probes, and what its forget found to erase: ``{"records": n, "keys": k}``
    (``None`` for requests sealed before that was recorded)."""

    probes: list[bytes]
    found: dict[str, int] | None

    @property
    def found_nothing(self) -> bool:
        return self.found is not None and not any(self.found.values())


def _texts(value: object) -> Iterable[str]:
    """String leaves (and the whole JSON text) of a value, long enough to be a probe."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    yield json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class RecordSample:
    """Probes of a plan's records, taken while their keys exist (wrapped keys, content windows),
    and how many of them still hold something: ``held`` records (a row or a live key), of which
    ``live_keys`` have their lineage key."""

    keys: list[bytes]
    windows: list[bytes]
    held: int
    live_keys: int


def sample_reads(ids: Sequence[str], scope: bytes | None, subjects: Sequence[bytes]) -> list[ops.Op[Any]]:
    """What :func:`sample_records` of ``ids`` reads first, for a forget to send ahead with its
    locks (a list equal to the one it samples then: a record "written since" changes it), and
    the key rows that open a record of ``scope`` (the target's): the scope's and its ancestors',
    and those of ``subjects``, the subjects every record of the scope carries. A record
    elsewhere, or with other subjects, reads the rest of its own."""
    if len(ids) > MAX_SAMPLED_RECORDS:
        return []
    keys: list[ops.Op[Any]] = [] if scope is None else [ops.ScopeChainRows(scope)]
    if subjects:
        keys.append(ops.SubjectRows(list(subjects)))
    return [ops.SampleRows(list(ids)), *keys]


def sample_records(txn: Txn, ids: Sequence[str], open_record: Opener) -> RecordSample:
    """Probes of at most :data:`MAX_SAMPLED_RECORDS` of ``ids``, spread evenly over those of
    which something is still in the database (a record an earlier erasure purged has nothing left
    to probe, and must not take a sampled record's place): ciphertext and vector windows, wrapped
    keys, and the opened record's plaintext and vector windows. Call before their keys are
    destroyed; it reads every one of ``ids``, so a large forget calls it outside its transaction."""
    keys: list[bytes] = []  # wrapped record and lineage keys
    windows: list[bytes] = []  # ciphertext, plaintext and vector windows
    if len(ids) <= MAX_SAMPLED_RECORDS:  # every one is sampled: all read at once, one statement
        every = txn.run(ops.SampleRows(ids))
        live = {i for i, (line, _, _) in every.items() if line.wrapped is not None}
        held = sorted({i for i, (_, row, _) in every.items() if row is not None} | live)
        chosen = _evenly(held, MAX_SAMPLED_RECORDS)
        lineage = {i: every[i][0] for i in chosen}
        rows = {i: (row, line) for i, (line, row, _) in every.items() if row is not None}
        cells = {i: cell for i, (_, _, cell) in every.items()}
    else:
        live = txn.run(ops.LineageKeyed(ids))
        held = sorted(txn.run(ops.ExistingRecords(ids)) | live)
        chosen = _evenly(held, MAX_SAMPLED_RECORDS)
        lineage = txn.run(ops.Lineage(chosen))
        rows = txn.run(ops.RecordsOfIds(chosen)) if chosen else {}  # every row and its lineage at once
        cells = {}
    for record_id in chosen:
        found = rows.get(record_id)
        if found is None:
            continue  # no row left: its lineage keys are probed below
        row, row_lineage = found
        # the search index's sealed vector
        cell = cells[record_id] if record_id in cells else txn.run(ops.VectorCell(row.version))
        for blob in (row.ciphertext, row.vector, None if cell is None else sealed_part(cell)):
            if blob:
                windows.extend(probe_windows(blob))
        if row.wrapped:
            keys.append(bytes(row.wrapped))
        opened = open_record(txn, row, row_lineage)
        if opened is not None:
            record, vector = opened
            for text in _texts(record.value):
                windows.extend(_text_windows(text))
            if vector:
                windows.extend(_vector_windows(vector))
    for sampled in (lineage[i] for i in chosen if i in lineage):
        for blob in (sampled.wrapped, sampled.subjects):
            if blob:
                keys.append(bytes(blob))
    return RecordSample(keys, windows, len(held), len(live))


def sample_probes(
    txn: Txn,
    plan: ForgetPlan,
    open_record: Opener,
    records: RecordSample | None = None,
    *,
    whole: bool = True,
) -> ProbeSample:
    """Probes of everything ``plan`` will destroy, and what it found; call before the keys are
    destroyed. ``records``: its records' sample if taken before (outside the forget's
    transaction); ``whole``: the plan is applied whole here (else only the keys of its head are
    destroyed now, and only those are probed, see :meth:`ForgetPlan.target_keys`).

    At most :data:`MAX_PROBES_PER_REQUEST` (the scan's cost grows with the count): the wrapped
    scope and subject keys always, then wrapped record keys and content windows in equal shares,
    each spread evenly over every record the plan destroys (not the first records only), from at
    most :data:`MAX_SAMPLED_RECORDS` records chosen the same way among those of which something is
    still in the database. What it found is counted over all of them."""
    pinned: list[bytes] = []  # destroyed scope and subject keys: few, and each guards many records
    if records is None:
        records = sample_records(txn, plan.destroy_records, open_record)
    scopes, subjects = plan.keys_to_destroy(txn) if whole else plan.target_keys(txn)
    # (a key forget destroys no scope or subject key: nothing to read)
    for scope in (txn.run(ops.ScopeRows(scopes)) if scopes else {}).values():
        if scope.wrapped:
            pinned.append(bytes(scope.wrapped))
    for wrapped, _ in (txn.run(ops.SubjectRows(subjects)) if subjects else {}).values():
        if wrapped:
            pinned.append(bytes(wrapped))
    found = {"records": records.held, "keys": records.live_keys + len(pinned)}
    pinned, keys, windows = (_usable(group) for group in (pinned, records.keys, records.windows))
    budget = MAX_PROBES_PER_REQUEST - min(len(pinned), MAX_PROBES_PER_REQUEST)
    take_keys = min(len(keys), max(budget // 2, budget - len(windows)))
    probes = [
        *_evenly(pinned, MAX_PROBES_PER_REQUEST),
        *_evenly(keys, take_keys),
        *_evenly(windows, budget - take_keys),
    ]
    return ProbeSample(list(dict.fromkeys(probes)), found)


def _usable(probes: list[bytes]) -> list[bytes]:
    """Distinct probes that can prove something: a probe that is one byte repeated would match
    any zeroed page."""
    return list(dict.fromkeys(p for p in probes if len(p) >= PROBE_MIN and len(set(p)) > 1))


def _evenly(items: list[T], count: int) -> list[T]:
    """``count`` of ``items`` spread evenly from first to last (all of them if there are fewer)."""
    if len(items) <= count:
        return items
    if count <= 0:
        return []
    return [items[int(i)] for i in np.linspace(0, len(items) - 1, num=count)]


def _vector_windows(vector: bytes, count: int = 4) -> list[bytes]:
    """Float-aligned 32-byte windows made only of non-zero floats. A window of a sparse vector
    that is mostly zero bytes would match zeroed pages by chance (and slow the scan), so such
    vectors give fewer or no plaintext probes; their ciphertext probes still prove erasure."""
    floats = np.frombuffer(vector, dtype=np.float32)
    nonzero = floats != 0
    # start positions of 8 consecutive non-zero floats
    runs = np.convolve(nonzero.astype(np.int32), np.ones(8, dtype=np.int32), mode="valid") == 8
    starts = np.flatnonzero(runs)
    if not len(starts):
        return []
    picked = starts[np.linspace(0, len(starts) - 1, num=min(count, len(starts)), dtype=np.intp)]
    return [vector[4 * int(i) : 4 * int(i) + 32] for i in dict.fromkeys(picked.tolist())]


def _text_windows(text: str) -> list[bytes]:
    """32-byte windows of the text as UTF-8, UTF-16-LE and hex: bounded in size (a long value
    costs no more to scan for) and revealing only fragments while sealed."""
    probes: list[bytes] = []
    for encoded in (text.encode(), text.encode("utf-16-le"), text.encode().hex().encode()):
        if len(encoded) >= PROBE_MIN:
            probes.extend(probe_windows(encoded, width=32, count=4))
    return probes


def seal_probes(key: bytes, request_id: str, sample: ProbeSample) -> bytes:
    body = json.dumps({"probes": [p.hex() for p in sample.probes], "found": sample.found}).encode()
    return seal(key, body, _AAD + request_id.encode())


def open_probes(key: bytes | None, request_id: str, blob: bytes | None) -> ProbeSample | None:
    """The probes and tally, or ``None`` if there are none or their key is gone (its epoch
    destroyed) or they do not open under it."""
    if blob is None or key is None:
        return None
    body = open_sealed(key, blob, _AAD + request_id.encode())
    if body is None:
        return None
    doc = json.loads(body)
    found = {str(k): int(v) for k, v in doc["found"].items()} if doc.get("found") is not None else None
    return ProbeSample([bytes.fromhex(p) for p in doc["probes"]], found)
