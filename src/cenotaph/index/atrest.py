"""Vectors at rest: each record's embedding sealed in its own row, under a key that dies with the record's.

A search computes embeddings in memory; this module seals each into a *cell* kept next to its record (the
``vectors`` table, keyed by the record's version) so that the next process to open the store reads them back
instead of decrypting and embedding every record again. A cell is only a cache: one that is missing, from
another embedder or that fails to open is ignored and its record embedded again.

Cell layout (``S`` subject tokens of 32 bytes each, ``D`` the embedder's dimension)::

    b"cv1" | stamp (8) | flags (1) | S (1) | subject tokens (32 x S) | nonce (12) | AES-GCM(float32 x D) | tag (16)

- ``stamp``: the first 8 bytes of SHA-256 of the embedder's id and dimension
  (:func:`cenotaph.index.embedder.embedder_id`). A cell made by another embedder is skipped unopened, and since
  the stamp is also in the key, it could not be opened anyway: a store reopened with another embedder never
  mixes the two embedders' vectors.
- the vector key is ``BLAKE2b(key=content_seed, "cenotaph-vector/1" | stamp | scope keys root..leaf | "|" |
  subject keys [| lineage key])`` (keyed BLAKE2b: a PRF, and a third of HMAC-SHA256's cost on the path that
  opens every cell after a restart): the record's own content seed (random, wrapped by a KEK epoch in the row) and every
  scope and subject key its content key depends on, and for a derived record (flag 1) its lineage key, which
  depends on every source's. A record without sources needs no lineage key: its lineage seed is destroyed in
  the same statement as its content seed. So whatever shreds the record -- its own keys, a scope, a subject, a
  source, a destroyed KEK epoch -- shreds its vector in the same instant, in the live files and in every copy.
- the associated data binds the cell to the record id and version; the header needs no binding, since every
  byte of it (stamp, flags, subject tokens) goes into the key.

A cell lives and dies with its record: triggers delete it when the row is deleted (purge, expiry, overwrite)
and when the record is hidden or its keys destroyed (a forget), in the same statement; the residue scan probes
its sealed part (:func:`sealed_part`) like the ciphertext. Nothing here writes plaintext.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from numpy.typing import NDArray

from ..backends import ops
from ..backends.base import LineageRow, RecordRow, Txn
from ..crypto.aead import NONCE_BYTES, derive_message
from ..records import RecordCrypto

__all__ = ["LiveVector", "VectorCells", "sealed_part", "stamp_of"]

LiveVector = tuple[str, int, bytes, bytes, int, bytes | None]
"""A row of ``Txn.live_vectors``: record id, version, scope token, wrapped content seed, its epoch, cell."""

_MAGIC = b"cv1"
_LABEL = b"cenotaph-vector/1"
_STAMP_BYTES = 8
_TOKEN = 32
_TAG = 16
_DERIVED = 1
_FIXED = len(_MAGIC) + _STAMP_BYTES + 2  # magic, stamp, flags, subject count
_SEPARATOR = derive_message(b"", b"|")
_PERSON = b"cenotaph-vec/1"


def _vector_key(seed: bytes, message: bytes) -> bytes:
    return hashlib.blake2b(message, key=seed, digest_size=32, person=_PERSON).digest()


def _aad(record_id: str, version: int) -> bytes:
    return record_id.encode() + version.to_bytes(8, "big")


def stamp_of(ident: str) -> bytes:
    """The 8-byte stamp naming an embedder (id and dimension) in every cell it made."""
    return hashlib.sha256(b"cenotaph-embedder\0" + ident.encode()).digest()[:_STAMP_BYTES]


def sealed_part(cell: bytes) -> bytes:
    """The random part of a cell (nonce, ciphertext, tag): what a residue probe may sample. The header (magic,
    stamp, subject tokens) is shared with every other record of the same embedder and subjects, so a probe of it
    would match the cells of records that were not erased."""
    if len(cell) < _FIXED or cell[:3] != _MAGIC:
        return cell  # not a cell of this format: probe all of it
    return cell[_FIXED + _TOKEN * cell[_FIXED - 1] :]


class _GroupKeys:
    """The key-derivation input of each (scope, subjects) group, derived once per call and never kept."""

    def __init__(self, crypto: RecordCrypto, txn: Txn, stamp: bytes) -> None:
        self._crypto = crypto
        self._txn = txn
        self._stamp = stamp
        self._messages: dict[tuple[bytes, bytes], bytes | None] = {}

    def message(self, scope_token: bytes, subject_tokens: bytes) -> bytes | None:
        """The key input before the lineage part; None if a scope or subject key is destroyed."""
        group = (scope_token, subject_tokens)
        if group in self._messages:
            return self._messages[group]
        scope_keys = self._crypto.scope_chain(self._txn, scope_token)
        tokens = [subject_tokens[i : i + _TOKEN] for i in range(0, len(subject_tokens), _TOKEN)]
        subject_keys = self._crypto.subject_keys(self._txn, tokens)
        message = None
        if scope_keys is not None and subject_keys is not None:
            message = (
                derive_message(_LABEL, self._stamp, *scope_keys)
                + _SEPARATOR
                + derive_message(b"", *subject_keys)
            )
        self._messages[group] = message
        return message

    def lineage_part(self, lineage: LineageRow | None) -> bytes | None:
        """What a derived record's key adds: its lineage key (None if a source's is destroyed)."""
        key = None if lineage is None else self._crypto.lineage_key_of(self._txn, lineage)
        return None if key is None else derive_message(b"lineage", key)


class VectorCells:
    """Seals and opens the vector cells of one embedder (``ident``: its :func:`embedder_id`)."""

    def __init__(self, crypto: RecordCrypto, ident: str, dim: int) -> None:
        self._crypto = crypto
        self._stamp = stamp_of(ident)
        self._prefix = _MAGIC + self._stamp
        self._width = 4 * dim
        self._dim = dim

    def open(self, txn: Txn, entries: Sequence[LiveVector], out: NDArray[np.float32]) -> list[int]:
        """Open the cells of ``entries`` (``Txn.live_vectors`` rows) into the rows of ``out`` and
        return the positions in ``entries`` that opened (row ``i`` of ``out`` holds the ``i``-th of them).

        A cell that is missing, from another embedder, malformed, or whose keys are destroyed is not opened;
        its record must be embedded again. The vectors are unit-norm and finite: they were when sealed. This
        loop runs for every record after a restart: it is kept flat."""
        groups = _GroupKeys(self._crypto, txn, self._stamp)
        unwrap = self._crypto.keys.unwrap
        prefix, width, fixed = self._prefix, self._width, _FIXED
        size = fixed + NONCE_BYTES + width + _TAG
        raw = out.data.cast("B")  # out is C-contiguous: its rows, byte by byte
        found: list[int] = []
        derived: list[int] = []
        last_scope = last_tokens = b""
        message: bytes | None = None
        blake2b, aead = hashlib.blake2b, AESGCM
        offset = 0
        for pos, (record_id, version, scope_token, wrapped, epoch, cell) in enumerate(entries):
            if cell is None or not cell.startswith(prefix):
                continue
            end = fixed + _TOKEN * cell[fixed - 1]
            if len(cell) != size + end - fixed:
                continue
            if cell[fixed - 2] & _DERIVED:
                derived.append(pos)
                continue
            tokens = cell[fixed:end]
            if scope_token != last_scope or tokens != last_tokens or not last_scope:
                last_scope, last_tokens, message = scope_token, tokens, groups.message(scope_token, tokens)
            seed = unwrap(wrapped, epoch)
            if message is None or seed is None:
                continue
            key = blake2b(message, key=seed, digest_size=32, person=_PERSON).digest()
            try:  # inlined _decrypt: this line runs once per record
                plain = aead(key).decrypt(
                    cell[end : end + NONCE_BYTES],
                    cell[end + NONCE_BYTES :],
                    record_id.encode() + version.to_bytes(8, "big"),
                )
            except InvalidTag:
                continue
            raw[offset : offset + width] = plain
            offset += width
            found.append(pos)
        for pos, plain in self._open_derived(txn, entries, derived, groups):
            raw[offset : offset + width] = plain
            offset += width
            found.append(pos)
        return found

    def _open_derived(
        self, txn: Txn, entries: Sequence[LiveVector], derived: list[int], groups: _GroupKeys
    ) -> list[tuple[int, bytes]]:
        """Cells of derived records: their key also needs the lineage key (a lineage row each)."""
        opened: list[tuple[int, bytes]] = []
        unwrap = self._crypto.keys.unwrap
        for start in range(0, len(derived), 500):
            part = derived[start : start + 500]
            lineage = txn.run(ops.Lineage([entries[pos][0] for pos in part]))
            for pos in part:
                record_id, version, scope_token, wrapped, epoch, cell = entries[pos]
                assert cell is not None  # only cells with a header were queued
                end = _FIXED + _TOKEN * cell[_FIXED - 1]
                message = groups.message(scope_token, cell[_FIXED:end])
                extra = groups.lineage_part(lineage.get(record_id))
                seed = unwrap(wrapped, epoch)
                if message is None or extra is None or seed is None:
                    continue
                plain = _decrypt(_vector_key(seed, message + extra), cell, end, _aad(record_id, version))
                if plain is not None:
                    opened.append((pos, plain))
        return opened

    def seal_many(
        self,
        txn: Txn,
        rows: Sequence[RecordRow],
        lineage: Mapping[str, LineageRow],
        vectors: NDArray[np.float32],
    ) -> list[bytes | None]:
        """A cell for each row's vector (row ``i`` of ``vectors``); None where a key is already destroyed."""
        groups = _GroupKeys(self._crypto, txn, self._stamp)
        return [self._seal(row, lineage.get(row.id), vectors[i], groups) for i, row in enumerate(rows)]

    def _seal(
        self, row: RecordRow, lineage: LineageRow | None, vector: NDArray[np.float32], groups: _GroupKeys
    ) -> bytes | None:
        seed = self._crypto.keys.unwrap(row.wrapped, row.epoch)
        if seed is None or lineage is None:
            return None
        tokens = bytes(lineage.subject_tokens)
        message = groups.message(row.scope_token, tokens)
        flags = 0
        if message is not None and lineage.sources:
            extra = groups.lineage_part(lineage)
            message = None if extra is None else message + extra
            flags = _DERIVED
        if message is None:
            return None
        header = self._prefix + bytes([flags, len(tokens) // _TOKEN]) + tokens
        nonce = os.urandom(NONCE_BYTES)
        plain = np.asarray(vector, dtype="<f4").tobytes()
        return (
            header
            + nonce
            + AESGCM(_vector_key(seed, message)).encrypt(nonce, plain, _aad(row.id, row.version))
        )


def _decrypt(key: bytes, cell: bytes, end: int, aad: bytes) -> bytes | None:
    try:
        return AESGCM(key).decrypt(cell[end : end + NONCE_BYTES], cell[end + NONCE_BYTES :], aad)
    except InvalidTag:
        return None
